"""PopTorch's memory controls for one op: ``set_available_memory``, ``serializedMatMul`` and
``recomputationCheckpoint``.

None changes what a model computes; each changes how much memory an op may use on the IPU,
and so the compiler's memory plan and simulated time (docs/differences.md). ipupod keeps the
graph torch exports and carries them as attributes of the op they apply to:

* ``set_available_memory(t, p)``: ``available_memory_proportion`` (float) on the matrix
  product, convolution or embedding lookup that made ``t``;
* ``serializedMatMul(lhs, rhs, mode, factor)``: the product ``lhs @ rhs``, with
  ``serialization_mode`` (``input_channels``, ``reducing_dim`` or ``output_channels``) and
  ``serialization_factor`` on its MatMul;
* ``recomputationCheckpoint(t, ...)``: ``recompute_checkpoint`` (int 1) on the op that made
  each ``t`` (any op): training keeps its outputs for the backward pass and recomputes the
  values between checkpoints (device/compiler/memory_plan.h). A checkpoint of a model input changes
  nothing (inputs are kept anyway) and leaves no attribute.

While a model is exported each call leaves a marker node in the ``ai.graphcore`` domain
(as PopTorch's own custom ops are); :func:`apply_markers` moves its attributes onto the op
that made its input and removes it, before the model goes to the compiler. On the CPU both
are the plain computation.
"""

from __future__ import annotations

from typing import Any

import torch

from ipupod.poptorch._support import isRunningOnIpu
from ipupod.poptorch.enums import MatMulSerializationMode

DOMAIN = "ai.graphcore"
_AVAILABLE_MEMORY = "SetAvailableMemory"
_SERIALIZED_MATMUL = "SerializedMatMul"
_CHECKPOINT = "RecomputationCheckpoint"
# The ops each marker may follow (as the compiler plans them, device/compiler/temporaries.h);
# None: any op.
_TARGETS = {_AVAILABLE_MEMORY: ("MatMul", "Gemm", "Conv", "Gather"),
            _SERIALIZED_MATMUL: ("MatMul",),
            _CHECKPOINT: None}
_NAMES = {_AVAILABLE_MEMORY: "set_available_memory", _SERIALIZED_MATMUL: "serializedMatMul",
          _CHECKPOINT: "recomputationCheckpoint"}


class _AvailableMemory(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, proportion: float) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def symbolic(g: Any, x: Any, proportion: float) -> Any:
        out = g.op(f"{DOMAIN}::{_AVAILABLE_MEMORY}", x,
                   available_memory_proportion_f=float(proportion))
        out.setType(x.type())  # an identity: torch's shape inference keeps the type
        return out


class _Serialized(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mode: str, factor: int) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def symbolic(g: Any, x: Any, mode: str, factor: int) -> Any:
        out = g.op(f"{DOMAIN}::{_SERIALIZED_MATMUL}", x, serialization_mode_s=mode,
                   serialization_factor_i=int(factor))
        out.setType(x.type())
        return out


class _Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad

    @staticmethod
    def symbolic(g: Any, x: Any) -> Any:
        out = g.op(f"{DOMAIN}::{_CHECKPOINT}", x, recompute_checkpoint_i=1)
        out.setType(x.type())
        return out


def _checkpoint(tensor: Any) -> Any:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"recomputationCheckpoint takes tensors (or one tuple or list of "
                         f"them), not {type(tensor).__name__}")
    if not isRunningOnIpu():
        return tensor
    return _Checkpoint.apply(tensor)


def recomputationCheckpoint(*tensors: Any) -> Any:  # noqa: N802 - PopTorch's name
    """PopTorch's ``poptorch.recomputationCheckpoint``: marks each tensor as a recomputation
    checkpoint - kept from the forward pass for the backward pass, where the values between
    checkpoints are recomputed - and returns it (one tensor for one, a tuple for several,
    and a tuple or list for one tuple or list). Training recomputes with the IPUConfig's
    ``recompute_checkpoint_every_layer`` or when the model is pipelined over several IPUs,
    as PopTorch does; elsewhere a compile warning says the checkpoints change nothing. The
    values are unchanged."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        return type(tensors[0])(_checkpoint(t) for t in tensors[0])
    out = tuple(_checkpoint(t) for t in tensors)
    return out[0] if len(out) == 1 else out


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float
                         ) -> torch.Tensor:
    """PopTorch's ``poptorch.set_available_memory``: the share (0 to 1) of the IPU's memory
    the op that made ``tensor`` - a matrix product, convolution or embedding lookup - may
    use for temporaries. Returns ``tensor``."""
    proportion = float(available_memory_proportion)
    if not 0.0 <= proportion <= 1.0:
        raise ValueError(f"set_available_memory: the proportion must be between 0 and 1, "
                         f"not {available_memory_proportion!r}")
    if not isRunningOnIpu():
        return tensor
    return _AvailableMemory.apply(tensor, proportion)


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor,  # noqa: N802 - PopTorch's name
                     mode: MatMulSerializationMode, factor: int = 0,
                     keep_precision: bool = False) -> torch.Tensor:
    """PopTorch's ``poptorch.serializedMatMul``: ``lhs @ rhs``, computed on the IPU in
    ``factor`` parts split along ``mode``'s dimension (the rows of ``lhs``, the reduction,
    or the columns of ``rhs``), each needing less temporary memory. ``keep_precision`` is
    accepted: ipupod computes in float32."""
    if not isinstance(mode, MatMulSerializationMode):
        raise ValueError(f"serializedMatMul: mode must be a poptorch.MatMulSerializationMode, "
                         f"not {mode!r}")
    out = torch.matmul(lhs, rhs)
    if mode is MatMulSerializationMode.Disabled:
        return out
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"serializedMatMul: factor must be a positive integer, not "
                         f"{factor!r}")
    if not isRunningOnIpu():
        return out
    return _Serialized.apply(out, mode.value, factor)


def apply_markers(proto: Any) -> None:
    """Moves each marker's attributes onto the op that made its input and removes the
    marker (see the module's docstring). ValueError naming the op when a marker follows
    an op it cannot apply to."""
    graph = proto.graph
    outputs = {o.name for o in graph.output}
    for marker in [n for n in graph.node if n.domain == DOMAIN and n.op_type in _TARGETS]:
        source = marker.input[0]
        # looked up again for each marker: one marker may follow another
        producer = next((n for n in graph.node if source in n.output), None)
        result = marker.output[0]
        if producer is None and marker.op_type == _CHECKPOINT:  # an input: nothing to mark
            if result in outputs:  # returned as it came: an Identity keeps both names
                marker.domain, marker.op_type = "", "Identity"
                del marker.attribute[:]
                continue
        else:
            _move_attributes(marker, producer)
        graph.node.remove(marker)
        if result in outputs:  # the marker's name is the model's: the product takes it
            _rename(graph, source, result)
        else:
            _rename(graph, result, source)
    if not any(n.domain == DOMAIN for n in graph.node):
        kept = [o for o in proto.opset_import if o.domain != DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)


def _move_attributes(marker: Any, producer: Any) -> None:
    allowed = _TARGETS[marker.op_type]
    if producer is None or (allowed is not None and (
            producer.domain not in ("", "ai.onnx") or producer.op_type not in allowed)):
        made_by = "an input of the model" if producer is None else \
            f"{producer.op_type} node '{producer.name}'"
        raise ValueError(f"{_NAMES[marker.op_type]} applies to the output of a "
                         f"{' or '.join(allowed or ())}; its tensor is made by {made_by}")
    for attribute in list(marker.attribute):
        kept = [a for a in producer.attribute if a.name != attribute.name]
        del producer.attribute[:]
        producer.attribute.extend(kept + [attribute])


def _rename(graph: Any, old: str, new: str) -> None:
    stale = [v for v in graph.value_info if v.name == old]
    for v in stale:
        graph.value_info.remove(v)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
