"""What the client uploads, before any call: an executable or a blob, as bytes or a file.

An upload is content-addressed: the server is asked for the bytes by their SHA-256 first and
sent them only when it lacks them. :class:`IpxSource` is an ``.ipx`` (its payload's hash is
in its header, client/ipx_header.h); :class:`BlobSource` anything the blob store holds (the
hash is computed here; a mapping of arrays becomes a deterministic ``.npz``, so the same
arrays are stored once). Both stream exactly the size they were hashed at, in 1 MiB chunks
(tensors.declared_chunks). No calls are made here: ipupod.calls uploads them.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from typing import Any, Iterator, Mapping, Optional, Tuple, Union

import grpc
import numpy as np

from ipupod import errors, tensors
from ipupod._proto import execution_pb2, jobs_pb2

#: The first bytes of every .ipx, and the format version this client reads.
IPX_MAGIC = b"\x89IPX\r\n\x1a\n"
IPX_FORMAT_VERSION = 1
#: An .ipx header's size: magic, version, sizes, the payload's SHA-256.
IPX_HEADER_BYTES = 64
#: A blob file's format by its extension (JobSpec's ``format``).
TENSOR_FORMATS = {".npz": "npz", ".safetensors": "safetensors", ".npy": "npy", ".onnx": "onnx"}

#: An .ipx as a path or its bytes.
IpxFile = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
#: A blob: a file path, bytes, or a mapping of arrays (stored as an .npz).
Blob = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Mapping[str, Any]]


def ipx_content_hash(header: bytes, name: str, location: str) -> str:
    """The payload's SHA-256 (hex) from an .ipx header (client/ipx_header.h); INVALID_ARGUMENT
    for bytes that are not an .ipx of this format version."""
    if len(header) < IPX_HEADER_BYTES or not header.startswith(IPX_MAGIC):
        raise errors.local_error(f"{name} is not an ipupod executable (.ipx): compile the "
                                 f"model with `ipupod compile MODEL.onnx`",
                                 grpc.StatusCode.INVALID_ARGUMENT, location)
    version = int.from_bytes(header[8:12], "little")
    if version != IPX_FORMAT_VERSION:
        raise errors.local_error(f"{name} has executable format {version} but this client "
                                 f"reads {IPX_FORMAT_VERSION}: recompile it with this ipupod",
                                 grpc.StatusCode.INVALID_ARGUMENT, location)
    return header[24:56].hex()


class IpxSource:
    """An .ipx as bytes or a file: its header's content hash and its upload chunks."""

    def __init__(self, executable: IpxFile) -> None:
        location = "Client.upload_executable"
        self._data: Optional[memoryview] = None
        self._path: Optional[str] = None
        if isinstance(executable, (bytes, bytearray, memoryview)):
            self._data = memoryview(executable).cast("B")
            header = bytes(self._data[:IPX_HEADER_BYTES])
            self.size = len(self._data)
            self._name = "the executable bytes"
        else:
            self._path = os.fspath(executable)
            self._name = f"executable '{self._path}'"
            header, self.size = _read_header(self._path, location)
        self.sha256 = ipx_content_hash(header, self._name, location)

    def chunks(self) -> Iterator[execution_pb2.ExecutableChunk]:
        # exactly the size checked: bytes appended since are not sent
        return tensors.declared_chunks(
            execution_pb2.ExecutableChunk, self.sha256, self.size, self._data, self._path,
            lambda left: errors.local_error(
                f"{self._name} got shorter while it was uploaded; upload it again once it stays "
                f"unchanged", grpc.StatusCode.DATA_LOSS, "Client.upload_executable"))


def _read_header(path: str, location: str) -> tuple:
    try:
        if not os.path.isfile(path):
            what = "does not exist" if not os.path.exists(path) else "is not a regular file"
            code = (grpc.StatusCode.NOT_FOUND if not os.path.exists(path)
                    else grpc.StatusCode.INVALID_ARGUMENT)
            raise errors.local_error(f"executable '{path}' {what}", code, location)
        with open(path, "rb") as file:
            return file.read(IPX_HEADER_BYTES), os.fstat(file.fileno()).st_size
    except OSError as error:
        raise errors.local_error(f"cannot read executable '{path}': {error.strerror}",
                                 grpc.StatusCode.PERMISSION_DENIED, location) from None


def npz_bytes(arrays: Mapping[str, Any], location: str) -> bytes:
    """Named arrays as a deterministic .npz (fixed member times), so the same arrays make the
    same blob and are stored once."""
    checked = tensors.to_arrays(arrays, location)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in checked.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, array, allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)),
                             member.getvalue())
    return out.getvalue()


class BlobSource:
    """A blob's bytes (memory or file), its SHA-256, size, format and upload chunks."""

    def __init__(self, blob: Blob, what: str, location: str) -> None:
        self.what = what
        self._data: Optional[memoryview] = None
        self._path: Optional[str] = None
        self.format = "npz"
        if isinstance(blob, Mapping):
            self._data = memoryview(npz_bytes(blob, location))
        elif isinstance(blob, (bytes, bytearray, memoryview)):
            self._data = memoryview(blob).cast("B")
        else:
            self._path = os.fspath(blob)
            self.format = TENSOR_FORMATS.get(os.path.splitext(self._path)[1].lower(), "")
        if self._data is not None:
            self.sha256, self.size = hashlib.sha256(self._data).hexdigest(), len(self._data)
        else:
            self.sha256, self.size = _hash_file(self._path, what, location)

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (fewer when the blob is shorter)."""
        if self._data is not None:
            return bytes(self._data[:size])
        with open(self._path, "rb") as file:
            return file.read(size)

    def chunks(self) -> Iterator[jobs_pb2.BlobChunk]:
        # exactly the hashed size; other changes fail the server's check
        return tensors.declared_chunks(
            jobs_pb2.BlobChunk, self.sha256, self.size, self._data, self._path,
            lambda left: errors.local_error(
                f"{self.what} '{self._path}' changed while it was uploaded ({left} bytes left "
                f"of the {self.size} hashed); nothing was stored: upload it again once it stays "
                f"unchanged", grpc.StatusCode.DATA_LOSS, "Client.put_blob"))


def _hash_file(path: str, what: str, location: str) -> Tuple[str, int]:
    if not os.path.exists(path):
        raise errors.local_error(f"{what} '{path}' does not exist", grpc.StatusCode.NOT_FOUND,
                                 location)
    if not os.path.isfile(path):
        raise errors.local_error(f"{what} '{path}' is not a regular file",
                                 grpc.StatusCode.INVALID_ARGUMENT, location)
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as file:
            while piece := file.read(tensors.CHUNK_BYTES):
                digest.update(piece)
                size += len(piece)
    except OSError as error:
        raise errors.local_error(f"cannot read {what} '{path}': {error.strerror}",
                                 grpc.StatusCode.PERMISSION_DENIED, location) from None
    if size == 0:
        raise errors.local_error(f"{what} '{path}' is empty", grpc.StatusCode.INVALID_ARGUMENT,
                                 location)
    return digest.hexdigest(), size
