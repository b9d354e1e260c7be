"""Exporting a wrapped model to ONNX for ipupod's compiler, and PopTorch's batch rules.

A model is exported once, by torch.onnx (opset 14, no constant folding, so every parameter
and buffer keeps its ``state_dict`` name as an ONNX initializer), on one micro-batch of the
first call's inputs: the call's batch is micro-batch x deviceIterations x replicationFactor
(x gradientAccumulation for training), PopTorch's rule, and each input's dim 0 is split so
(each input its own micro-batch: inputs' dim 0 may differ).
Training models are exported in training mode (BatchNorm then updates its running
statistics on the server), inference models in eval mode.

torch 1.13 exports neither ``mse_loss`` nor ``l1_loss``; :func:`register_symbolics` adds
both, as the ops their definitions are made of.

A parameter that is a block of another parameter's memory (optimum-graphcore's
``SerializedEmbedding`` makes its slices of a word embedding tied to the LM head so) is one
tensor with it on the CPU: what either is trained by lands in the same memory. torch.onnx
would export the two as separate weights, which the device would train apart; so while
exporting, such a view is computed from its base (:func:`parameter_views`), and the exported
graph reads the base alone through a ``Slice``: one weight on the device, trained by the sum
of both gradients, as the tied model is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.overrides import TorchFunctionMode

from ipupod.poptorch import attributes, blocks, custom_ops, memory, multiconv
from ipupod.poptorch._support import logger, running_on_ipu

OPSET = 14
_REDUCTIONS = {0: None, 1: "ReduceMean", 2: "ReduceSum"}
_registered = False


def identity_loss(x: torch.Tensor, reduction: str = "none") -> torch.Tensor:
    """Marks ``x`` as the loss to train on, reduced by ``"sum"``, ``"mean"`` or ``"none"``
    (then ``x`` must already be a scalar)."""
    if reduction == "sum":
        return x.sum()
    if reduction == "mean":
        return x.mean()
    if reduction == "none":
        return x
    raise ValueError(f"identity_loss reduction must be 'sum', 'mean' or 'none', not "
                     f"{reduction!r}")


def _reduce(g: Any, value: Any, reduction: int) -> Any:
    op = _REDUCTIONS.get(reduction)
    return value if op is None else g.op(op, value, keepdims_i=0)


def _mse_loss(g: Any, input: Any, target: Any, reduction: Any) -> Any:
    from torch.onnx import symbolic_helper
    difference = g.op("Sub", input, target)
    return _reduce(g, g.op("Mul", difference, difference),
                   symbolic_helper._maybe_get_const(reduction, "i"))


def _l1_loss(g: Any, input: Any, target: Any, reduction: Any) -> Any:
    from torch.onnx import symbolic_helper
    return _reduce(g, g.op("Abs", g.op("Sub", input, target)),
                   symbolic_helper._maybe_get_const(reduction, "i"))


# torch.onnx's scalar type names -> ONNX TensorProto data types
_ONNX_TYPES = {"Float": 1, "Double": 11, "Half": 10, "Long": 7, "Int": 6, "Bool": 9}


def _copy(g: Any, self: Any, src: Any, non_blocking: Any) -> Any:
    """``aten::copy`` (what torch.onnx makes of ``buffer.copy_(src)`` once it removes the
    mutation): ``src`` broadcast to ``self``'s static shape, in ``self``'s type."""
    from torch.onnx import symbolic_helper
    value = src
    sizes = symbolic_helper._get_tensor_sizes(self)
    if sizes is None or any(s is None for s in sizes):
        value = g.op("Expand", value, g.op("Shape", self))
    elif symbolic_helper._get_tensor_sizes(src) != sizes:
        shape = torch.tensor(sizes, dtype=torch.int64)
        value = g.op("Expand", value, g.op("Constant", value_t=shape))
    dtype, src_dtype = (symbolic_helper._try_get_scalar_type(t) for t in (self, src))
    if dtype in _ONNX_TYPES and dtype != src_dtype:
        value = g.op("Cast", value, to_i=_ONNX_TYPES[dtype])
    return value


def register_symbolics() -> None:
    """Teaches torch.onnx the losses the seed's models use and ``copy_`` into a buffer (once
    per process)."""
    global _registered
    if not _registered:
        torch.onnx.register_custom_op_symbolic("aten::mse_loss", _mse_loss, OPSET)
        torch.onnx.register_custom_op_symbolic("aten::l1_loss", _l1_loss, OPSET)
        torch.onnx.register_custom_op_symbolic("aten::copy", _copy, OPSET)
        _registered = True


@contextlib.contextmanager
def _keeping_every_weight() -> Iterator[None]:
    """While exporting, every parameter stays an initializer of its own.

    In eval mode torch.onnx (1.13) merges initializers whose values are equal into one (two
    freshly initialised LayerNorms) and fuses a BatchNorm into the Conv before it; either way
    a parameter stops being a weight the device can be given, and a later
    ``copyWeightsToDevice()`` would not reach it. Here initializers are merged only where they
    are one tensor (tied weights, which the executable records as aliases) and nothing is
    fused. :func:`module_state` checks the result, so a torch that exports otherwise fails
    loudly instead of compiling stale weights."""
    c = torch._C
    dedup = getattr(c, "_jit_pass_onnx_deduplicate_initializers", None)
    peephole = getattr(c, "_jit_pass_onnx_eval_peephole", None)
    if dedup is None or peephole is None:
        yield
        return
    c._jit_pass_onnx_deduplicate_initializers = (
        lambda graph, params, is_train: dedup(graph, params, True))
    c._jit_pass_onnx_eval_peephole = lambda graph, params: params
    try:
        yield
    finally:
        c._jit_pass_onnx_deduplicate_initializers = dedup
        c._jit_pass_onnx_eval_peephole = peephole


@dataclasses.dataclass
class ModuleState:
    """What the exported model holds of the module's state: the initializers that are its
    parameters and buffers, the names that share a tensor with one of them (tied weights:
    alias -> initializer), and the state the forward never reads."""

    parameters: List[str]
    buffers: List[str]
    aliases: Dict[str, str]
    unused: List[str]


@dataclasses.dataclass(frozen=True)
class ParameterView:
    """A parameter that is a contiguous block of another's memory: ``base[start:stop]``
    along the base's rows (``rows``), else of its flattened elements, shaped as ``shape``."""

    name: str
    base: str
    start: int
    stop: int
    rows: bool
    shape: Tuple[int, ...]


def _span(tensor: torch.Tensor) -> Tuple[int, int, int]:
    """(storage address, first element, one past the last) of a tensor's elements."""
    offset = tensor.storage_offset()
    return tensor.storage().data_ptr(), offset, offset + tensor.numel()


def _view_of(name: str, tensor: torch.Tensor, base_name: str, base: torch.Tensor
             ) -> ParameterView:
    start = tensor.storage_offset() - base.storage_offset()
    row = base[0].numel() if base.dim() >= 1 else 0
    if tensor.dim() >= 1 and row and tuple(tensor.shape[1:]) == tuple(base.shape[1:]) \
            and start % row == 0:
        return ParameterView(name, base_name, start // row, start // row + tensor.shape[0], True,
                             tuple(tensor.shape))
    return ParameterView(name, base_name, start, start + tensor.numel(), False,
                         tuple(tensor.shape))


def parameter_views(model: torch.nn.Module) -> List[ParameterView]:
    """The module's parameters that lie inside a larger parameter's memory. ValueError for
    two that share memory when neither is a contiguous block of the other (the device could
    not keep them one tensor)."""
    parameters = {n: t for n, t in model.named_parameters() if t.numel() > 0}
    spans = {n: _span(t) for n, t in parameters.items()}
    views: Dict[str, ParameterView] = {}
    for name, tensor in parameters.items():
        address, first, last = spans[name]
        bases = [(n, t) for n, t in parameters.items() if n != name
                 and t.numel() > tensor.numel() and t.is_contiguous() and t.dtype == tensor.dtype
                 and spans[n][0] == address and spans[n][1] <= first and last <= spans[n][2]]
        if bases and tensor.is_contiguous():
            base_name, base = max(bases, key=lambda b: b[1].numel())
            views[name] = _view_of(name, tensor, base_name, base)
    kept = [n for n in parameters if n not in views]
    for i, name in enumerate(kept):
        address, first, last = spans[name]
        for other in kept[i + 1:]:
            if spans[other][0] == address and spans[other][1] < last and first < spans[other][2]:
                raise ValueError(f"parameters {name} and {other} share memory and neither is a "
                                 f"contiguous block of the other; ipupod keeps parameters one "
                                 f"tensor on the device only when one is a block of the other "
                                 f"(a row slice, as optimum's SerializedEmbedding makes)")
    return list(views.values())


@contextlib.contextmanager
def _views_as_slices(model: torch.nn.Module, views: List[ParameterView]) -> Iterator[None]:
    """While exporting, each view is no parameter of its module but computed from its base
    when the module runs, so the trace reads the base through a Slice."""
    restored, handles = [], []
    for view in views:
        module_name, _, attribute = view.name.rpartition(".")
        module = model.get_submodule(module_name)
        base = model.get_parameter(view.base)
        restored.append((module, attribute, module._parameters.pop(attribute)))

        def compute(owner: torch.nn.Module, inputs: Any, attribute: str = attribute,
                    base: torch.Tensor = base, view: ParameterView = view) -> None:
            value = base[view.start:view.stop] if view.rows else \
                base.reshape(-1)[view.start:view.stop].view(view.shape)
            object.__setattr__(owner, attribute, value)
        handles.append(module.register_forward_pre_hook(compute))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module, attribute, parameter in reversed(restored):
            module.__dict__.pop(attribute, None)
            module._parameters[attribute] = parameter


def _storage_key(tensor: torch.Tensor) -> Tuple[Any, ...]:
    return (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def module_state(model: torch.nn.Module, proto: Any) -> ModuleState:
    """The module's parameters and buffers as ``proto`` (the exported model) holds them.

    A state name that is not an initializer is either one tensor with another that is (tied
    weights) or not read by the forward; anything else would be a value the exporter folded
    into a constant, which the device could never be given: that is an error."""
    initializers = {i.name for i in proto.graph.initializer}
    state = model.state_dict(keep_vars=True)
    parameters = {n for n, _ in model.named_parameters()}
    buffers = {n for n, _ in model.named_buffers()}
    exported_by_storage = {_storage_key(state[n]): n for n in state if n in initializers}
    aliases: Dict[str, str] = {}
    unused: List[str] = []
    for name, tensor in state.items():
        if name in initializers:
            continue
        target = exported_by_storage.get(_storage_key(tensor))
        if target is not None:
            aliases[name] = target
        else:
            unused.append(name)
    read = {i for node in proto.graph.node for i in node.input}
    folded = [n for n in unused if n in read]
    if folded:
        raise ValueError(f"torch.onnx folded {', '.join(folded)} into constants of the "
                         f"exported model, so the device could never be given their values; "
                         f"this torch exports differently from the one ipupod supports "
                         f"(1.13)")
    return ModuleState(parameters=sorted(parameters & initializers),
                       buffers=sorted(buffers & initializers), aliases=aliases, unused=unused)


def _declare(proto: Any, state: ModuleState) -> None:
    """Writes the module state into the model's metadata (device/graph/graph.h ModuleState), so the
    compiler keeps every one of them a writable weight, trains exactly the parameters and
    lets a write by an alias's name reach its weight."""
    for key, lines in (("ipupod.parameters", state.parameters),
                       ("ipupod.buffers", state.buffers),
                       ("ipupod.aliases", [f"{a}={t}" for a, t in sorted(state.aliases.items())])):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, "\n".join(lines)


@dataclasses.dataclass
class Exported:
    """An exported model: the ONNX bytes, input and output names, how the outputs nest
    (``structure``: "tensor", or a tuple/list of the same), which outputs are scalars, the
    IPUs its blocks use (0 = no blocks) and the initializers that hold module state."""

    onnx: bytes
    inputs: List[str]
    outputs: List[str]
    structure: Any
    scalar_outputs: List[str]
    block_ipus: int
    weights: List[str]
    # inference: buffers the forward changes in place -> the output holding the new value
    buffers: Dict[str, str] = dataclasses.field(default_factory=dict)
    # state names that are one tensor with an exported weight (tied) -> that weight
    aliases: Dict[str, str] = dataclasses.field(default_factory=dict)


def input_names(model: torch.nn.Module, count: int, kwargs: Dict[str, Any]) -> List[str]:
    """The forward's parameter names for ``count`` positional and the keyword inputs."""
    parameters = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in parameters[:count]]
    names += [f"input_{i}" for i in range(len(names), count)]
    return names + [k for k in kwargs if k not in names]


def positional(model: torch.nn.Module, args: Sequence[Any], kwargs: Dict[str, Any]
               ) -> Tuple[torch.Tensor, ...]:
    """The call's tensors in the forward's order (keyword inputs after the positional ones,
    ``None`` keywords dropped)."""
    tensors = list(args) + [v for v in kwargs.values() if v is not None]
    for index, value in enumerate(tensors):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"input {index} is a {type(value).__name__}; ipupod models take "
                             f"tensors only")
    return tuple(tensors)


def micro_batches(inputs: Sequence[torch.Tensor], names: Sequence[str], combined: int,
                  rule: str) -> List[int]:
    """Each input's micro-batch: its own dim 0 divided by ``combined`` (PopTorch's rule: every
    input's dim 0 is a multiple of the factor; inputs may differ, such as one of samples and
    one of tokens)."""
    sizes = []
    for name, tensor in zip(names, inputs):
        if tensor.dim() == 0 or tensor.shape[0] % combined:
            raise ValueError(f"input '{name}' has shape {list(tensor.shape)}: its dim 0 must "
                             f"be a multiple of {combined} ({rule}); change the batch or the "
                             f"options")
        sizes.append(tensor.shape[0] // combined)
    return sizes


def micro_batch(inputs: Sequence[torch.Tensor], names: Sequence[str], combined: int,
                rule: str) -> int:
    """The first input's micro-batch (1 for a model without inputs, such as PopTorch's
    CounterModel): the executable's ``micro_batch_size``. Every input is checked as
    :func:`micro_batches` does."""
    sizes = micro_batches(inputs, names, combined, rule)
    return sizes[0] if sizes else 1


def _structure(value: Any, names: List[str]) -> Any:
    if isinstance(value, torch.Tensor):
        names.append(f"output_{len(names)}")
        return "tensor"
    if isinstance(value, (tuple, list)):
        return type(value)(_structure(v, names) for v in value)
    raise ValueError(f"the model returned a {type(value).__name__}; ipupod models return "
                     f"tensors, or tuples and lists of tensors")


def rebuild(structure: Any, values: Iterator[torch.Tensor]) -> Any:
    """The outputs nested as the model returned them."""
    if structure == "tensor":
        return next(values)
    return type(structure)(rebuild(s, values) for s in structure)


@contextlib.contextmanager
def _tracing(model: torch.nn.Module, training: bool) -> Iterator[None]:
    was_training = model.training
    model.train(training)
    try:
        with running_on_ipu():
            yield
    finally:
        model.train(was_training)


# ------------------------------------------------------------------ float16 (PopTorch 4.7)
#
# torch 1.13 runs few float16 ops on the CPU, so a model that holds or takes float16 tensors is
# traced with stand-ins: while torch.onnx traces, every float16 tensor is a float64 one (float32
# stays float32, and a trace has no float64 of its own: ipupod refuses float64 tensors and a
# model's own .double() becomes float32, as PopTorch computes doubles in float32), and the
# exported graph's DOUBLE becomes FLOAT16. While the forward runs, _HalfStandIns makes the
# stand-ins behave as float16: a float16 request (.half(), dtype=torch.half) makes one, dtype
# reads torch.half, and every op whose float operands mix the two types gets explicit casts to
# the type PopTorch gives it, so each tensor keeps its own type:
#
# * operands that are not module state (inputs and what is computed from them) follow PyTorch's
#   type promotion, as PopTorch's note in 4.7 says: float16 with float32 is float32, and a
#   0-dim tensor does not promote a dimensioned one;
# * a parameter or buffer (or a value computed from module state alone, such as a transposed
#   weight) used with such operands takes their type: "the parameters will be converted to
#   float16 if you call an operation with a float16 input" (4.7), and float16 parameters
#   called with float32 inputs are read as float32;
# * an in-place op keeps its tensor's type (PyTorch computes in the promoted type and stores
#   the result in the tensor's own), so buffers keep their types.

_HALF = torch.float64  # float16's stand-in while tracing
_IN_PLACE_DUNDERS = {"__iadd__": "__add__", "__isub__": "__sub__", "__imul__": "__mul__",
                     "__itruediv__": "__truediv__"}
# Ops whose second tensor gives a type or a shape, or that cast by themselves: never cast.
_NOT_PROMOTED = {"to", "type", "type_as", "view_as", "reshape_as", "expand_as", "copy_",
                 "__setitem__", "__getitem__", "set_", "new_tensor", "new_zeros", "new_ones",
                 "new_full", "new_empty", "masked_fill_", "index_put_", "index_copy_",
                 "index_fill_", "scatter_", "masked_scatter_", "fill_", "put_"}


def _stand_in(dtype: torch.dtype) -> torch.dtype:
    """The type a tensor of ``dtype`` (the model's) has while tracing."""
    if dtype == torch.half:
        return _HALF
    return torch.float32 if dtype == torch.float64 else dtype


def _real(dtype: torch.dtype) -> torch.dtype:
    """The model's type of a tensor that has ``dtype`` while tracing."""
    return torch.half if dtype == _HALF else dtype


def _remap_dtypes(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return _stand_in(value)
    if type(value) in (list, tuple):
        return type(value)(_remap_dtypes(v) for v in value)
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _cast(value: Any, dtype: torch.dtype, keep: Any = ()) -> Any:
    """``value`` with every float tensor (but those in ``keep``) of another type cast."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != dtype and \
                not any(value is k for k in keep):
            return value.to(dtype)
        return value
    if type(value) in (list, tuple):
        return type(value)(_cast(v, dtype, keep) for v in value)
    return value


def _promoted(tensors: List[torch.Tensor]) -> torch.dtype:
    """PyTorch's result type of float operands (float16 stand-ins and float32): a 0-dim
    operand does not promote a dimensioned one."""
    dimensioned = [t for t in tensors if t.dim() > 0]
    pool = dimensioned or tensors
    return torch.float32 if any(t.dtype == torch.float32 for t in pool) else _HALF


class _HalfStandIns(TorchFunctionMode):
    """While a traced forward runs: float64 tensors are float16 ones (see above)."""

    def __init__(self, state: List[torch.Tensor]) -> None:
        super().__init__()
        self._state: Dict[int, Any] = {}
        for tensor in state:
            self._mark(tensor)

    def _mark(self, tensor: torch.Tensor) -> None:
        key, state = id(tensor), self._state
        state[key] = weakref.ref(tensor, lambda _, key=key: state.pop(key, None))

    def _is_state(self, tensor: torch.Tensor) -> bool:
        ref = self._state.get(id(tensor))
        return ref is not None and ref() is tensor

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        if func == torch.Tensor.dtype.__get__:
            return _real(func(*args, **kwargs))
        name = getattr(func, "__name__", "")
        args, kwargs = _remap_dtypes(args), {k: _remap_dtypes(v) for k, v in kwargs.items()}
        if name == "half" and args and isinstance(args[0], torch.Tensor):
            func, args = torch.Tensor.to, (args[0], _HALF)
        elif name == "double" and args and isinstance(args[0], torch.Tensor):
            func, args = torch.Tensor.to, (args[0], torch.float32)
        tensors = list(_tensors(args)) + list(_tensors(kwargs))
        floats = [t for t in tensors if t.is_floating_point()]
        if len({t.dtype for t in floats}) > 1 and name not in _NOT_PROMOTED:
            func, args, kwargs = self._with_casts(func, name, args, kwargs, floats)
        result = func(*args, **kwargs)
        if tensors and all(self._is_state(t) for t in tensors):
            for out in _tensors(result):
                self._mark(out)
        return result

    def _with_casts(self, func: Any, name: str, args: Any, kwargs: Dict[str, Any],
                    floats: List[torch.Tensor]) -> Tuple[Any, Any, Dict[str, Any]]:
        in_place = name in _IN_PLACE_DUNDERS or (name.endswith("_") and not name.startswith("_"))
        if in_place:
            out_of_place = getattr(torch.Tensor, _IN_PLACE_DUNDERS.get(name, name[:-1]), None)
            if out_of_place is None:
                return func, args, kwargs
            target, dtype = args[0], _promoted(floats)
            cast_args, cast_kwargs = _cast(args, dtype), {k: _cast(v, dtype)
                                                          for k, v in kwargs.items()}

            def in_place_op(*unused: Any, **unused_kw: Any) -> torch.Tensor:
                value = out_of_place(*cast_args, **cast_kwargs)
                return target.copy_(value.to(target.dtype))
            return in_place_op, (), {}
        keep: List[torch.Tensor] = []
        if name in ("batch_norm", "instance_norm"):  # running statistics updated in place?
            stats = [t for t in list(args[1:3]) + [kwargs.get("running_mean"),
                                                   kwargs.get("running_var")]
                     if isinstance(t, torch.Tensor)]
            updates = kwargs.get("training", kwargs.get("use_input_stats",
                                                        args[5] if len(args) > 5 else False))
            x = args[0] if args else kwargs["input"]
            if updates and any(t.dtype != x.dtype for t in stats):
                raise ValueError(
                    f"a {name} in training mode reads {_real(x.dtype)} input but its running "
                    f"statistics are {_real(stats[0].dtype)}; it updates them in place, so "
                    f"they cannot be converted: give them the input's type")
            keep = stats if updates else []
        data = [t for t in floats if not self._is_state(t)]
        dtype = _promoted(data or floats)
        return (func, _cast(args, dtype, keep),
                {k: _cast(v, dtype, keep) for k, v in kwargs.items()})


def _uses_float16(model: torch.nn.Module, example: Sequence[torch.Tensor]) -> bool:
    tensors = list(model.state_dict().values()) + list(example) + \
        [v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
    return any(t.dtype == torch.half for t in tensors)


@contextlib.contextmanager
def _float16_stand_ins(model: torch.nn.Module) -> Iterator[List[torch.Tensor]]:
    """The model's float16 parameters and buffers as float64 stand-ins (yields the module
    state the trace reads); the tensors themselves are back afterwards, untouched."""
    parameters: List[Tuple[torch.nn.Parameter, torch.Tensor]] = []
    buffers: List[Tuple[torch.nn.Module, str, torch.Tensor]] = []
    seen: Dict[int, torch.Tensor] = {}
    for p in {id(p): p for p in model.parameters()}.values():
        if p.dtype == torch.half:
            parameters.append((p, p.data))
            p.data = p.data.to(_HALF)
    for module in model.modules():
        for name, b in list(module._buffers.items()):
            if b is not None and b.dtype == torch.half:
                buffers.append((module, name, b))
                module._buffers[name] = seen.setdefault(id(b), b.to(_HALF))
    try:
        yield list(model.parameters()) + list(model.buffers())
    finally:
        for p, data in parameters:
            p.data = data
        for module, name, b in buffers:
            module._buffers[name] = b


def _float16_from_stand_ins(proto: Any) -> None:
    """The traced graph's DOUBLE (float16's stand-in) as FLOAT16: initializers, Constant and
    ConstantOfShape values, graph inputs, outputs and value infos, Casts and dtype
    attributes."""
    from onnx import TensorProto, numpy_helper
    double, half = TensorProto.DOUBLE, TensorProto.FLOAT16

    def narrowed(t: Any) -> Any:
        return numpy_helper.from_array(numpy_helper.to_array(t).astype("float16"), t.name)

    g = proto.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == double:
            g.initializer[i].CopyFrom(narrowed(t))
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == double:
            v.type.tensor_type.elem_type = half
    for node in g.node:
        for a in node.attribute:
            if a.HasField("t") and a.t.data_type == double:
                a.t.CopyFrom(narrowed(a.t))
            if a.name in ("to", "dtype") and a.i == double:
                a.i = half


class _PlainTensors:
    """Tensor attributes of the model's modules that are neither parameters nor buffers
    (PopTorch 4.8's first CounterModel). PopTorch freezes their values as constants when it
    traces the forward, once; the host keeps what that one forward did to them. The export
    runs the forward more than once, and torch.onnx keeps a reference to such a tensor and
    reads it when it writes the graph: so every forward reads a copy holding the value from
    before the export (as a stand-in while tracing float16), set back to that value when the
    forward returns, and :meth:`restore` leaves the host as one forward left it."""

    def __init__(self, model: torch.nn.Module) -> None:
        state = {id(t) for t in model.state_dict(keep_vars=True).values()}
        self.entries = [(m, n, v, v.detach().clone()) for m in model.modules()
                        for n, v in list(vars(m).items())
                        if isinstance(v, torch.Tensor) and id(v) not in state]
        self._copies: List[torch.Tensor] = []
        self._first: Optional[List[Tuple[bool, torch.Tensor]]] = None

    def before_forward(self) -> None:
        self._copies = []
        shared: Dict[int, torch.Tensor] = {}  # one tensor held by two modules: one copy
        for module, name, original, value in self.entries:
            copy = shared.setdefault(id(original), value.clone().to(_stand_in(value.dtype)))
            self._copies.append(copy)
            setattr(module, name, copy)

    def after_forward(self) -> None:
        if self._first is None:
            self._first = []
            for (module, name, _, _), copy in zip(self.entries, self._copies):
                now = getattr(module, name)
                self._first.append((now is copy, now.detach().clone()
                                    if isinstance(now, torch.Tensor) else now))
        tracing = torch._C._get_tracing_state()  # the reset is not part of the model
        torch._C._set_tracing_state(None)
        try:
            with torch.no_grad():
                for (_, _, _, value), copy in zip(self.entries, self._copies):
                    copy.copy_(value.to(copy.dtype))
        finally:
            torch._C._set_tracing_state(tracing)

    def restore(self) -> None:
        for index, (module, name, original, _) in enumerate(self.entries):
            setattr(module, name, original)
            if self._first is None:
                continue
            in_place, value = self._first[index]
            if not isinstance(value, torch.Tensor):
                setattr(module, name, value)
            elif in_place:
                with torch.no_grad():
                    original.copy_(value.to(original.dtype))
            else:
                setattr(module, name, value.to(_real(value.dtype)))


@contextlib.contextmanager
def _forward_for_export(model: torch.nn.Module, plain: _PlainTensors,
                        state: Optional[List[torch.Tensor]]) -> Iterator[List[str]]:
    """The model's forward while the export runs it: plain tensor attributes as
    :class:`_PlainTensors` says, float16 stand-ins when ``state`` (the module state) is given,
    and, after the model's own outputs, the new values of the buffers named in the yielded
    list (empty until the caller fills it), so each is an ONNX output the compiler pairs with
    its buffer."""
    forward = model.forward
    own = vars(model).get("forward")
    returning: List[str] = []

    def traced(*args: Any, **kwargs: Any) -> Any:
        plain.before_forward()
        try:
            with (_HalfStandIns(state) if state is not None else contextlib.nullcontext()):
                out = forward(*args, **kwargs)
            if returning:
                out = (out,) + tuple(model.get_buffer(n) for n in returning)
        finally:
            plain.after_forward()
        return out
    model.forward = traced  # type: ignore[assignment]
    try:
        yield returning
    finally:
        if own is None:
            del model.forward
        else:
            model.forward = own  # type: ignore[assignment]


def export(model: torch.nn.Module, example: Tuple[torch.Tensor, ...], names: List[str],
           training: bool, strategy: blocks.ExecutionStrategy) -> Exported:
    """Exports ``model`` on ``example`` (each input's micro-batch) and annotates its blocks.
    A model with float16 tensors is traced with stand-ins and each tensor keeps its type
    (see above)."""
    import onnx
    register_symbolics()
    half = _uses_float16(model, example)
    if half:
        example = tuple(t.to(_stand_in(t.dtype)) for t in example)
    views = parameter_views(model)
    for view in views:
        logger.info("%s is a block of %s's memory: exported as a slice of it (one weight)",
                    view.name, view.base)
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    plain = _PlainTensors(model)
    try:
        with (_float16_stand_ins(model) if half else contextlib.nullcontext()) as state, \
                _tracing(model, training), torch.no_grad(), warnings.catch_warnings(), \
                _forward_for_export(model, plain, state) as returning:
            # a traced shape check (mse_loss's) is constant for the compiled shapes, as intended
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # BatchNorm's step counter is not exported; the compiler updates its statistics
            warnings.filterwarnings("ignore", "ONNX Preprocess - Removing mutation")
            # the memory controls' markers (memory.py) and PopTorch's ops (ops.py) are
            # custom-domain nodes torch.onnx cannot infer; their symbolics set the types
            warnings.filterwarnings("ignore", "The shape inference of ai.graphcore")
            warnings.filterwarnings("ignore", ".*_graph_op' is deprecated", FutureWarning)
            # ... and so are custom ops (custom_ops.py), whose symbolic sets the types too
            warnings.filterwarnings("ignore", "The shape inference of .* type is missing")
            # a model without inputs (PopTorch's CounterModel) is exported as it is
            warnings.filterwarnings("ignore", "No input args, skipping _decide_input_format")
            outputs: List[str] = []
            structure = _structure(model(*example), outputs)
            updated = _updated_buffers(model, saved, training)
            returning.extend(updated)
            buffer = io.BytesIO()
            mode = torch.onnx.TrainingMode.TRAINING if training else \
                torch.onnx.TrainingMode.EVAL
            with blocks.recording() as recorder, multiconv.recording() as convs, \
                    attributes.recording() as attributed, custom_ops.recording() as custom, \
                    _keeping_every_weight(), _views_as_slices(model, views):
                torch.onnx.export(model, example, buffer, input_names=names,
                                  output_names=outputs + list(updated.values()),
                                  opset_version=OPSET, do_constant_folding=False,
                                  training=mode)
    finally:
        plain.restore()
        model.load_state_dict(saved)
    proto = onnx.load_from_string(buffer.getvalue())
    custom_ops.declare(proto, custom)
    memory.apply_markers(proto)
    multiconv.apply(proto, convs)
    attributes.annotate(proto, attributed.scopes)
    if half:
        _float16_from_stand_ins(proto)
    _hold_overwritten_buffers(proto, updated, saved)
    ipus = blocks.annotate(proto, recorder.blocks, strategy)
    state = module_state(model, proto)
    _declare(proto, state)
    weights = set(model.state_dict())
    return Exported(onnx=proto.SerializeToString(), inputs=names, outputs=outputs,
                    structure=structure, scalar_outputs=_scalars(proto), block_ipus=ipus,
                    weights=[i.name for i in proto.graph.initializer if i.name in weights],
                    buffers=updated, aliases=state.aliases)


def _updated_buffers(model: torch.nn.Module, saved: Dict[str, torch.Tensor],
                     training: bool) -> Dict[str, str]:
    """The buffers one forward changed in place (PopTorch 4.8: they keep their values from
    run to run), each with the name of the output that will carry its new value. In training,
    BatchNorm's running statistics are left out (the compiler pairs a BatchNormalization's
    with its outputs itself; its step counter is not counted), as are integer buffers (the
    executable holds them as constants)."""
    implicit = set()
    if training:
        for prefix, module in model.named_modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                implicit |= {f"{prefix}.{n}" if prefix else n for n in
                             ("running_mean", "running_var", "num_batches_tracked")}
    changed = {}
    for name, value in model.named_buffers():
        if name not in saved or name in implicit:
            continue
        if training and not value.is_floating_point():
            continue
        if not torch.equal(value.to(saved[name].dtype), saved[name]):
            changed[name] = f"ipupod_buffer/{name}"
    return changed


def _hold_overwritten_buffers(proto: Any, updated: Dict[str, str],
                              saved: Dict[str, torch.Tensor]) -> None:
    """A buffer the forward overwrites without reading it (``buffer.copy_(x.mean(0))``) is
    no input of the traced graph, or one only its Shape reads (folded away). It is an
    initializer all the same (its value before the export), read by ``Where(true, new value,
    buffer)`` - the new value exactly - so the device holds it and ``copyWeightsToHost()``
    reads its new value (ipupodd drops an initializer no node reads)."""
    from onnx import TensorProto, helper, numpy_helper
    g = proto.graph
    have = {i.name for i in g.initializer}
    read = {i for node in g.node if node.op_type != "Shape" for i in node.input}
    for name, output in updated.items():
        if name in read:
            continue
        if name not in have:
            g.initializer.append(numpy_helper.from_array(saved[name].detach().cpu().numpy(),
                                                         name))
        index = next((k for k, node in enumerate(g.node) if output in node.output), None)
        if index is None:  # the graph output is an input or a constant: left as it is
            continue
        node, value = g.node[index], f"{output}/value"
        node.output[:] = [value if o == output else o for o in node.output]
        true = helper.make_node("Constant", [], [f"{output}/true"], name=f"{output}/True",
                                value=helper.make_tensor("true", TensorProto.BOOL, [], [True]))
        where = helper.make_node("Where", [true.output[0], value, name], [output],
                                 name=f"{output}/Where")
        g.node.insert(index + 1, where)
        g.node.insert(index + 1, true)


def _scalars(proto: Any) -> List[str]:
    return [o.name for o in proto.graph.output
            if o.type.tensor_type.HasField("shape") and not o.type.tensor_type.shape.dim]


def loss_name(exported: Exported) -> str:
    """The output to train on: the only scalar, else the last scalar output."""
    if not exported.scalar_outputs:
        raise ValueError("trainingModel needs the model to return its loss, a scalar: "
                         "`return output, loss` (poptorch.identity_loss makes a custom one)")
    return exported.scalar_outputs[-1]


def frozen(model: torch.nn.Module, exported: Exported, optimizer: Any = None) -> List[str]:
    """The parameters nothing trains: those with ``requires_grad`` False, and those in none
    of the optimizer's param groups (torch's optimizer never updates them, so neither may
    the device)."""
    parameters = dict(model.named_parameters())
    optimized = None if optimizer is None else {
        id(p) for group in optimizer.param_groups for p in group["params"]}
    return [n for n in exported.weights if n in parameters and (
        not parameters[n].requires_grad
        or (optimized is not None and id(parameters[n]) not in optimized))]
