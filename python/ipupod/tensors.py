"""Tensors on the ExecutionService wire, as numpy arrays (the codec of common/wire/tensor_stream.h).

A tensor travels as a ``TensorHeader`` (name, dtype, shape, total_bytes) followed by its
little-endian, row-major bytes in ``TensorData`` chunks of at most 1 MiB. The wire knows five
dtypes: float32, float16, int64, int32 and bool. Values given to this library may be numpy arrays,
torch tensors (moved to the CPU) or anything ``numpy.asarray`` takes; float64 is narrowed to
float32 (as the CLI reads float64 files), Python ints become int64; other dtypes are refused
with the list of those that work.

Receiving, :class:`TensorAssembler` checks each header before it allocates (a known dtype,
non-negative dims, total_bytes equal to the shape's size, at most 4 GiB per tensor and 65,536
tensors per stream, no duplicate names) and copies each chunk once into its array.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import grpc
import numpy as np

from ipupod import errors
from ipupod._proto import execution_pb2

#: The wire's bound on one chunk of tensor or file bytes.
CHUNK_BYTES = 1 << 20
#: The longest name a request may carry (a tensor, a weight, a session).
NAME_BYTES_MAX = 256
#: The most tensors one stream may carry.
TENSORS_MAX = 1 << 16
#: The largest tensor any model may hold or produce.
TENSOR_BYTES_MAX = 4 << 30
#: The most data a RunInline request's inputs, or its response's outputs, may hold in all
#: (common/wire/inline_tensors.h); larger steps go through the Run stream.
INLINE_BYTES_MAX = 1 << 20

#: Wire dtype name -> numpy dtype (little-endian).
DTYPES: Dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "bool": np.dtype("?"),
}

Arrays = Dict[str, np.ndarray]


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def to_numpy(name: str, value: Any, location: str) -> np.ndarray:
    """``value`` as a contiguous little-endian array of a wire dtype (see the module doc)."""
    if (type(value) is np.ndarray and value.dtype in _WIRE_NAMES  # noqa: E721 (not subclasses)
            and value.flags.c_contiguous):
        return value  # already what the wire carries: every step of a loop lands here
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind == "f" and array.dtype.itemsize == 8:
        array = array.astype(DTYPES["float32"])
    wire = wire_dtype_name(array.dtype)
    if wire is None:
        raise errors.local_error(
            f"tensor '{name}' is {array.dtype}, which ipupod does not carry; use one of "
            f"{', '.join(DTYPES)} (float64 is narrowed to float32 for you)",
            grpc.StatusCode.INVALID_ARGUMENT, location)
    # ascontiguousarray makes a 0-d array 1-d; a scalar (torch.zeros(()) parameter) stays 0-d
    return np.ascontiguousarray(array, dtype=DTYPES[wire]).reshape(array.shape)


def wire_dtype_name(dtype: np.dtype) -> Optional[str]:
    """The wire name of a numpy dtype ("float32", ...), or None when the wire has none."""
    try:
        return _WIRE_NAMES[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like (a list of fields)
        pass
    for name, wire in DTYPES.items():
        if np.dtype(dtype).newbyteorder("<") == wire.newbyteorder("<"):
            return name
    return None


#: The wire dtypes' own numpy dtypes -> their wire names: one dict lookup per tensor on every
#: step instead of comparing against each of the five (wire_dtype_name handles the rest).
_WIRE_NAMES: Dict[Any, str] = {wire: name for name, wire in DTYPES.items()}


def to_arrays(values: Mapping[str, Any], location: str) -> Arrays:
    """Every value of a mapping through :func:`to_numpy`, in order, names checked."""
    if not isinstance(values, Mapping):
        raise errors.local_error(
            f"expected a mapping of tensor names to arrays, got {type(values).__name__}",
            grpc.StatusCode.INVALID_ARGUMENT, location)
    out: Arrays = {}
    for name, value in values.items():
        check_name("tensor", str(name), location)
        out[str(name)] = to_numpy(str(name), value, location)
    return out


def check_name(what: str, name: str, location: str) -> None:
    """INVALID_ARGUMENT for an empty name or one over the wire's 256 bytes."""
    size = len(name.encode("utf-8"))
    if size == 0 or size > NAME_BYTES_MAX:
        raise errors.local_error(
            f"a {what} name of {size} bytes is not valid: names are 1-{NAME_BYTES_MAX} bytes",
            grpc.StatusCode.INVALID_ARGUMENT, location)


def header_of(name: str, array: np.ndarray) -> execution_pb2.TensorHeader:
    return execution_pb2.TensorHeader(name=name, dtype=wire_dtype_name(array.dtype),
                                      shape=list(array.shape), total_bytes=array.nbytes)


def chunks_of(data: Any) -> Iterator[bytes]:
    """Consecutive slices of at most CHUNK_BYTES of a bytes-like object (none when empty)."""
    view = memoryview(data).cast("B")
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[start:start + CHUNK_BYTES])


def declared_chunks(message_type: Callable[..., Any], sha256: str, size: int,
                    data: Optional[memoryview], path: Optional[str],
                    ended_early: Callable[[int], BaseException]) -> Iterator:
    """Upload messages (``ExecutableChunk``, ``BlobChunk``) of ``size`` bytes from ``data`` in
    memory or else the file at ``path``; the first declares ``sha256`` and ``total_bytes``.
    Exactly ``size`` bytes of a file are sent (bytes appended since are not); a file that ends
    sooner raises ``ended_early(bytes_left)``."""
    first = True
    for piece in _pieces(size, data, path, ended_early):
        message = message_type(data=piece)
        if first:
            message.sha256, message.total_bytes, first = sha256, size, False
        yield message


def _pieces(size: int, data: Optional[memoryview], path: Optional[str],
            ended_early: Callable[[int], BaseException]) -> Iterator[bytes]:
    if data is not None:
        yield from chunks_of(data)
        return
    left = size
    with open(path, "rb") as file:
        while left > 0:
            piece = file.read(min(CHUNK_BYTES, left))
            if not piece:
                raise ended_early(left)
            left -= len(piece)
            yield piece


def encode(arrays: Arrays, header: Callable[[Any], Any], data: Callable[[bytes], Any]) -> Iterator:
    """Request messages for every tensor: ``header(TensorHeader)`` then ``data(chunk)``s."""
    for name, array in arrays.items():
        yield header(header_of(name, array))
        flat = array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
        for chunk in chunks_of(flat):
            yield data(chunk)


class TensorAssembler:
    """Rebuilds named arrays from a stream of headers and chunks, checking as it goes.

    ``what`` names the stream in messages ("weights", "outputs"); ``location`` is the call.
    A malformed stream raises INTERNAL "ipupodd sent a malformed ... stream": the server's
    fault, not the caller's.
    """

    def __init__(self, what: str, location: str) -> None:
        self._what = what
        self._location = location
        self._done: Arrays = {}
        self._name: Optional[str] = None
        self._header: Optional[execution_pb2.TensorHeader] = None
        self._buffer: Optional[np.ndarray] = None
        self._filled = 0

    def _fail(self, problem: str) -> errors.Error:
        return errors.malformed_stream(self._what, problem, self._location)

    def _checked(self, header: execution_pb2.TensorHeader) -> Tuple[int, np.dtype, Tuple[int, ...]]:
        """The bytes, dtype and shape of the tensor ``header`` announces, after checking it
        against the wire's rules and the tensors already received (raises the
        malformed-stream error)."""
        name = header.name
        if not name or len(name.encode("utf-8")) > NAME_BYTES_MAX:
            raise self._fail(f"a tensor name of {len(name)} characters")
        if name in self._done:
            raise self._fail(f"tensor '{name}' sent twice")
        if len(self._done) >= TENSORS_MAX:
            raise self._fail(f"more than {TENSORS_MAX} tensors")
        dtype = DTYPES.get(header.dtype)
        if dtype is None:
            raise self._fail(f"tensor '{name}' has unknown dtype '{header.dtype}'")
        shape = tuple(header.shape)
        if shape and min(shape) < 0:
            raise self._fail(f"tensor '{name}' has a negative dim in {list(shape)}")
        size = math.prod(shape) * dtype.itemsize  # Python ints: no overflow on absurd shapes
        if size != header.total_bytes or size > TENSOR_BYTES_MAX:
            raise self._fail(f"tensor '{name}' declares {header.total_bytes} bytes for shape "
                             f"{list(shape)} {header.dtype} ({size} bytes)")
        return size, dtype, shape

    def add_whole(self, header: execution_pb2.TensorHeader, data: bytes) -> None:
        """A tensor whose bytes came whole with its header (``InlineTensor``): the checks of
        add_header + add_data + the end of the tensor, and one copy of ``data``."""
        self._complete_pending()
        size, dtype, shape = self._checked(header)
        name = header.name
        if len(data) > size:
            raise self._fail(f"more bytes than tensor '{name}' declared")
        if len(data) < size:
            raise self._fail(f"tensor '{name}' ended after {len(data)} of {size} bytes")
        # One copy, into a bytearray: the array is writable and not a view of the response.
        # (Few numpy calls: each costs more right after a round trip than in a loop.)
        array = np.frombuffer(bytearray(data), dtype)
        if dtype.kind == "b" and size and array.view(np.uint8).max() > 1:
            raise self._fail(f"bool tensor '{name}' holds values other than 0 and 1")
        self._done[name] = array.reshape(shape)

    def add_header(self, header: execution_pb2.TensorHeader) -> None:
        self._complete_pending()
        name, (size, _, _) = header.name, self._checked(header)
        self._name, self._header = name, header
        self._buffer = np.empty(size, dtype=np.uint8)
        self._filled = 0

    def add_data(self, data: bytes) -> None:
        if self._buffer is None:
            raise self._fail("data before any tensor header")
        if len(data) > CHUNK_BYTES:
            raise self._fail(f"a chunk of {len(data)} bytes (at most {CHUNK_BYTES})")
        end = self._filled + len(data)
        if end > self._buffer.size:
            raise self._fail(f"more bytes than tensor '{self._name}' declared")
        self._buffer[self._filled:end] = np.frombuffer(data, dtype=np.uint8)
        self._filled = end

    def _complete_pending(self) -> None:
        if self._buffer is None:
            return
        header = self._header
        if self._filled != self._buffer.size:
            raise self._fail(f"tensor '{self._name}' ended after {self._filled} of "
                             f"{self._buffer.size} bytes")
        array = self._buffer.view(DTYPES[header.dtype]).reshape(tuple(header.shape))
        if header.dtype == "bool" and self._buffer.size and self._buffer.max() > 1:
            raise self._fail(f"bool tensor '{self._name}' holds values other than 0 and 1")
        self._done[self._name] = array
        self._name, self._header, self._buffer, self._filled = None, None, None, 0

    def finish(self) -> Arrays:
        """Every tensor in stream order. REQUIRES: called once, at the end."""
        self._complete_pending()
        return self._done


def _length_delimited_tag(message: Any, field: str) -> bytes:
    number = message.DESCRIPTOR.fields_by_name[field].number
    return _varint(number << 3 | 2)  # wire type 2: a varint length, then the bytes


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SESSION_TAG = _length_delimited_tag(execution_pb2.RunInlineRequest, "session")
_INPUTS_TAG = _length_delimited_tag(execution_pb2.RunInlineRequest, "inputs")
_HEADER_TAG = _length_delimited_tag(execution_pb2.InlineTensor, "header")
_DATA_TAG = _length_delimited_tag(execution_pb2.InlineTensor, "data")

#: (name, dtype, shape) -> the InlineTensor's header field, as protobuf serialized it. A loop
#: of steps sends the same few headers every time; cleared when full.
_HEADER_FIELDS: Dict[Any, bytes] = {}
_HEADER_FIELDS_MAX = 256


def _header_field(name: str, array: np.ndarray) -> bytes:
    key = (name, array.dtype, array.shape)
    field = _HEADER_FIELDS.get(key)
    if field is None:
        header = header_of(name, array).SerializeToString()
        field = _HEADER_TAG + _varint(len(header)) + header
        if len(_HEADER_FIELDS) >= _HEADER_FIELDS_MAX:
            _HEADER_FIELDS.clear()
        _HEADER_FIELDS[key] = field
    return field


def inline_request(session: str, arrays: Arrays) -> bytes:
    """A serialized ``RunInlineRequest`` with every tensor inline (an ``InlineTensor`` of its
    header and all of its bytes): the bytes protobuf writes for the same message (test_package
    checks), without building the messages, which cost a small step more Python time than
    the rest of its encoding. Each tensor's bytes are copied once, into the request."""
    session_bytes = session.encode("utf-8")
    # proto3 writes no empty field: neither an empty session nor an empty tensor's data.
    parts = [_SESSION_TAG, _varint(len(session_bytes)), session_bytes] if session_bytes else []
    for name, array in arrays.items():
        header = _header_field(name, array)
        if array.nbytes == 0:
            parts += (_INPUTS_TAG, _varint(len(header)), header)
            continue
        size = _varint(array.nbytes)
        length = len(header) + len(_DATA_TAG) + len(size) + array.nbytes
        parts += (_INPUTS_TAG, _varint(length), header, _DATA_TAG, size,
                  array.reshape(-1).view(np.uint8))
    return b"".join(parts)


def decode_inline(inline: Any, what: str, location: str) -> Arrays:
    """The arrays of ``InlineTensor`` messages, checked as a stream's (TensorAssembler)."""
    # Each read of a bytes field makes a new copy of it: read each once.
    whole = [(tensor.header, tensor.data) for tensor in inline]
    total = sum(len(data) for _, data in whole)
    if total > INLINE_BYTES_MAX:
        raise errors.malformed_stream(what, f"{total} bytes inline (at most {INLINE_BYTES_MAX})",
                                      location)
    assembler = TensorAssembler(what, location)
    for header, data in whole:
        assembler.add_whole(header, data)
    return assembler.finish()


def as_torch(arrays: Arrays) -> Dict[str, Any]:
    """The same tensors as torch tensors (torch is imported only here)."""
    try:
        import torch
    except ImportError as error:
        raise errors.local_error(
            f"as_torch=True needs torch ({error}); install python3-torch or use numpy arrays",
            grpc.StatusCode.FAILED_PRECONDITION, "ipupod.tensors.as_torch") from None
    return {name: torch.from_numpy(np.array(array)) for name, array in arrays.items()}
