"""PopTorch's custom ops (user guide 4.9): ``poptorch.custom_op``.

On the IPU (an ``inferenceModel`` or ``trainingModel``), ``custom_op`` exports one ONNX node
``<domain>::<name>`` with the attributes given, and ipupodd runs it with the op's CPU
implementation from a custom op library (``device/customop/custom_op_abi.h``: a C ABI modelled on
ONNX Runtime's custom ops). ipupodd runs a library only from the directories its admin lists
(config ``custom_ops.library_dirs``), in a helper process of its own, so the library named
is a path *on the server*. It is found as PopTorch finds it:

* ``ctypes.cdll.LoadLibrary(path)`` in the script, as section 4.9.2 shows: ``custom_op``
  looks among the shared libraries loaded into this process for the one whose table
  (``IpupodCustomOpLibraryGet``) has ``domain::name``, and names its path - the server must
  have the library at the same path (a shared file system, or the admin's copy installed
  there);
* or ``custom_op(..., library="/opt/ipupod/custom-ops/libacme.so")``, ipupod's argument, for
  a library only the server has.

The exported model lists each domain's library in its metadata
(``ipupod.custom_op_libraries``, ``domain=path`` lines) and the domain's version in its
``opset_import``; the server checks the path and picks the op of the library's table for that
version. On the CPU ``custom_op`` computes nothing: it returns zeros shaped like
``example_outputs``, as PopTorch does. Attributes are PopTorch's (Table 4.1): float, int,
str (ASCII) and lists or tuples of one of them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc
import torch

from ipupod.errors import Error
from ipupod.poptorch._support import ExportRecording, isRunningOnIpu

#: The entry point and ABI version of custom_op_abi.h.
ENTRY_POINT = "IpupodCustomOpLibraryGet"
ABI_VERSION = 1
#: The metadata naming each custom domain's library (device/graph/custom_ops.h).
LIBRARIES_METADATA_KEY = "ipupod.custom_op_libraries"
_RESERVED_DOMAINS = ("", "ai.onnx", "ai.graphcore")


class _Op(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("since_version", ctypes.c_int32), ("end_version", ctypes.c_int32),
                ("num_inputs", ctypes.c_int32), ("num_outputs", ctypes.c_int32),
                ("input_types", ctypes.c_void_p), ("attributes", ctypes.c_void_p),
                ("infer_shapes", ctypes.c_void_p), ("compute", ctypes.c_void_p),
                ("gradient", ctypes.c_void_p)]


class _Library(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("name", ctypes.c_char_p),
                ("num_ops", ctypes.c_int32), ("ops", ctypes.POINTER(_Op))]


def _error(message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> Error:
    return Error(message, code=code, type="client.application", location="poptorch.custom_op")


# ------------------------------------------------------------------ finding the library

def _mapped_libraries() -> List[str]:
    """The shared objects mapped into this process, in the order they appear."""
    paths: List[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
                    path = parts[5].strip()
                    if path not in paths:
                        paths.append(path)
    except OSError:
        pass
    return paths


def _ops_of(path: str) -> Optional[List[Tuple[str, str]]]:
    """The (domain, name) of each op of the custom op library at ``path`` (already loaded
    into this process), or None when it is not one."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        get = getattr(lib, ENTRY_POINT)
    except (OSError, AttributeError):
        return None
    get.restype = ctypes.POINTER(_Library)
    get.argtypes = [ctypes.c_uint32]
    table = get(ABI_VERSION)
    if not table or table.contents.abi_version != ABI_VERSION or table.contents.num_ops < 1:
        return None
    ops = table.contents.ops
    return [(ops[i].domain.decode("utf-8", "replace"), ops[i].name.decode("utf-8", "replace"))
            for i in range(min(table.contents.num_ops, 1024))
            if ops[i].domain is not None and ops[i].name is not None]


_tables: Dict[str, Optional[List[Tuple[str, str]]]] = {}


def loaded_library_for(domain: str, name: str) -> str:
    """The path of the one loaded custom op library with ``domain::name``; ``poptorch.Error``
    (NOT_FOUND, or INVALID_ARGUMENT when several have it) saying what to do otherwise."""
    found = []
    for path in _mapped_libraries():
        if path not in _tables:
            _tables[path] = _ops_of(path)
        if (domain, name) in (_tables[path] or []):
            found.append(path)
    if len(found) == 1:
        return found[0]
    if not found:
        raise _error(f"no custom op library loaded in this process has {domain}::{name}: "
                     f"load it as PopTorch does (ctypes.cdll.LoadLibrary(PATH), section 4.9.2) "
                     f"or pass library=PATH, its path on the server (docs/python.md, "
                     f"\"Custom ops\")", grpc.StatusCode.NOT_FOUND)
    raise _error(f"{len(found)} loaded custom op libraries have {domain}::{name} "
                 f"({', '.join(found)}): pass library=PATH to say which")


# ------------------------------------------------------------------ attributes

def _check_ascii(value: Any) -> None:
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_ascii(v)
    elif isinstance(value, str) and any(ord(c) >= 128 for c in value):
        raise ValueError(f"{value} contains non-ASCII characters.")


def _attribute_kind(key: Any, value: Any) -> str:
    """torch.onnx's attribute suffix for PopTorch's Table 4.1: f, i or s (a list of one of
    them gets the same, torch.onnx adds the s). ValueError as PopTorch raises."""
    if not isinstance(key, str):
        raise ValueError("All attribute keys must be strings.")
    kinds = {float: "f", int: "i", bool: "i", str: "s"}
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"attribute '{key}' is an empty list: ipupod cannot tell its type; "
                             f"give at least one element")
        if any(type(v) is not type(value[0]) for v in value):
            raise ValueError("The types in the list/tuple containing the attribute values must "
                             "all be the same.")
        value = value[0]
    if type(value) not in kinds:
        raise ValueError("Attribute values must be floats, ints, strings or a list/tuple of "
                         "float, ints of strings.")
    _check_ascii(value)
    return kinds[type(value)]


def _attribute_arguments(attributes: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The attributes as ``g.op`` keyword arguments (``alpha_f=0.02``)."""
    arguments: Dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        kind = _attribute_kind(key, value)
        _check_ascii(value)
        if isinstance(value, (list, tuple)):
            value = [int(v) if kind == "i" else v for v in value]
        elif kind == "i":
            value = int(value)
        arguments[f"{key}_{kind}"] = value
    return arguments


# ------------------------------------------------------------------ export


@dataclasses.dataclass
class _Recorder:
    versions: Dict[str, int] = dataclasses.field(default_factory=dict)
    libraries: Dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, domain: str, version: int, library: str) -> None:
        if self.versions.setdefault(domain, version) != version:
            raise _error(f"custom op domain '{domain}' is used at versions "
                         f"{self.versions[domain]} and {version} in one model; use one")
        if self.libraries.setdefault(domain, library) != library:
            raise _error(f"custom op domain '{domain}' comes from two libraries in one model "
                         f"({self.libraries[domain]} and {library}); ipupod takes one library "
                         f"per domain")


_recording = ExportRecording(_Recorder)
#: Records the custom ops of a model while it is exported (not reentrant).
recording = _recording.recording


def declare(proto: Any, recorder: _Recorder) -> None:
    """Writes the recorded domains' versions into the model's opset_import and their
    libraries into its metadata."""
    if not recorder.versions:
        return
    present = {o.domain: o for o in proto.opset_import}
    for domain, version in recorder.versions.items():
        entry = present.get(domain) or proto.opset_import.add()
        entry.domain, entry.version = domain, version
    entry = proto.metadata_props.add()
    entry.key = LIBRARIES_METADATA_KEY
    entry.value = "\n".join(f"{d}={p}" for d, p in sorted(recorder.libraries.items()))


def _function(name: str, domain: str, arguments: Dict[str, Any],
              examples: Sequence[torch.Tensor]) -> Any:
    """An autograd Function whose export is the custom node; its values are zeros, made
    from plain int shapes (a traced tensor's sizes are values of the outer trace, which the
    Function's own cannot refer to)."""
    shapes = [([int(d) for d in e.shape], e.dtype) for e in examples]

    class _CustomOp(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> Any:  # type: ignore[override]
            return tuple(torch.zeros(shape, dtype=dtype) for shape, dtype in shapes)

        @staticmethod
        def symbolic(g: Any, *inputs: Any) -> Any:
            out = g.op(f"{domain}::{name}", *inputs, outputs=len(examples), **arguments)
            outs = list(out) if len(examples) > 1 else [out]
            for value, example in zip(outs, examples):
                value.setType(torch._C.TensorType.create_from_tensor(example))
            return tuple(outs) if len(examples) > 1 else out
    return _CustomOp


def _check_call(inputs: Any, name: Any, domain: Any, domain_version: Any,
                example_outputs: Any) -> None:
    if not isinstance(inputs, (list, tuple)) or \
            not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("custom_op's inputs must be a list of torch.Tensor")
    if not isinstance(example_outputs, (list, tuple)) or not example_outputs or \
            not all(isinstance(t, torch.Tensor) for t in example_outputs):
        raise TypeError("custom_op's example_outputs must be a non-empty list of torch.Tensor")
    if not isinstance(name, str) or not name or not isinstance(domain, str) or \
            domain in _RESERVED_DOMAINS or "=" in domain or "\n" in domain:
        raise ValueError(f"custom_op needs an op name and a domain of its own (not "
                         f"{domain!r}: ONNX's and PopTorch's are taken)")
    if isinstance(domain_version, bool) or not isinstance(domain_version, int) or \
            domain_version < 1:
        raise ValueError(f"custom_op's domain_version must be an int >= 1, not "
                         f"{domain_version!r}")


def custom_op(inputs: Sequence[torch.Tensor], name: str, domain: str, domain_version: int,
              example_outputs: Sequence[torch.Tensor],
              attributes: Optional[Dict[str, Any]] = None,
              library: Optional[str] = None) -> List[torch.Tensor]:
    """PopTorch's ``custom_op`` (user guide 4.9): the outputs of op ``domain::name`` (at
    version ``domain_version`` of the domain) on ``inputs``, one per example output, each
    of its example's dtype and shape. ``attributes``: PopTorch's Table 4.1 types.
    ``library`` (ipupod's): the library's path on the server, when it is not loaded into
    this process with ctypes (module docstring). On the CPU the outputs are zeros."""
    _check_call(inputs, name, domain, domain_version, example_outputs)
    arguments = _attribute_arguments(attributes)
    if library is not None and (not isinstance(library, str) or not os.path.isabs(library) or
                                "\n" in library):
        raise ValueError(f"custom_op's library must be an absolute path on the server, not "
                         f"{library!r}")
    examples = [torch.zeros_like(e) for e in example_outputs]
    if not isRunningOnIpu() or _recording.current is None:
        return examples
    path = library if library is not None else loaded_library_for(domain, name)
    _recording.current.add(domain, domain_version, path)
    outputs = _function(name, domain, arguments, examples).apply(*inputs)
    return list(outputs) if isinstance(outputs, tuple) else [outputs]
