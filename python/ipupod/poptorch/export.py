"""Exporting a wrapped model to ONNX for ipupod's compiler, and PopTorch's batch rules.

A model is exported once, by torch.onnx (opset 14, no constant folding, so every parameter
and buffer keeps its ``state_dict`` name as an ONNX initializer), on one micro-batch of the
first call's inputs: the call's batch is micro-batch x deviceIterations x replicationFactor
(x gradientAccumulation for training), PopTorch's rule, and each input's dim 0 is split so.
Training models are exported in training mode (BatchNorm then updates its running
statistics on the server), inference models in eval mode.

torch 1.13 exports neither ``mse_loss`` nor ``l1_loss``; :func:`register_symbolics` adds
both, as the ops their definitions are made of.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import warnings
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import torch

from ipupod.poptorch import blocks, custom_ops

OPSET = 14
_REDUCTIONS = {0: None, 1: "ReduceMean", 2: "ReduceSum"}
_registered = False
_on_ipu = False


def isRunningOnIpu() -> bool:  # noqa: N802 - PopTorch's name
    """True while the model is traced for the IPU (exported), False on the CPU."""
    return _on_ipu


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


def register_symbolics() -> None:
    """Teaches torch.onnx the losses the seed's models use (once per process)."""
    global _registered
    if not _registered:
        torch.onnx.register_custom_op_symbolic("aten::mse_loss", _mse_loss, OPSET)
        torch.onnx.register_custom_op_symbolic("aten::l1_loss", _l1_loss, OPSET)
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
    """Writes the module state into the model's metadata (graph/graph.h ModuleState), so the
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


def micro_batch(inputs: Sequence[torch.Tensor], names: Sequence[str], combined: int,
                rule: str) -> int:
    """The micro-batch size: every input's dim 0 divided by ``combined`` (1 for a model
    without inputs, such as PopTorch's CounterModel)."""
    if not inputs:
        return 1
    sizes = set()
    for name, tensor in zip(names, inputs):
        if tensor.dim() == 0 or tensor.shape[0] % combined:
            raise ValueError(f"input '{name}' has shape {list(tensor.shape)}: its dim 0 must "
                             f"be a multiple of {combined} ({rule}); change the batch or the "
                             f"options")
        sizes.add(tensor.shape[0] // combined)
    if len(sizes) != 1:
        raise ValueError(f"the inputs' batch sizes differ ({sorted(sizes)} per micro-batch); "
                         f"give every input the same dim 0")
    return sizes.pop()


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
    global _on_ipu
    was_training = model.training
    model.train(training)
    _on_ipu = True
    try:
        yield
    finally:
        _on_ipu = False
        model.train(was_training)


@contextlib.contextmanager
def _in_float32(model: torch.nn.Module, half: bool) -> Iterator[None]:
    """A half model as float32 while torch.onnx traces it (torch 1.13 cannot trace half
    on the CPU); its own parameters and buffers are half again afterwards."""
    if not half:
        yield
        return
    model.float()
    try:
        yield
    finally:
        model.half()


def _to_float16(proto: Any) -> None:
    """The exported float32 graph as the half model's: float initializers, Constant
    values, graph inputs, outputs and value infos, and Casts to float become FLOAT16."""
    from onnx import TensorProto, numpy_helper
    g = proto.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype("float16"), t.name))
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Constant" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype("float16"), a.t.name))
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16


def export(model: torch.nn.Module, example: Tuple[torch.Tensor, ...], names: List[str],
           training: bool, strategy: blocks.ExecutionStrategy, half: bool = False) -> Exported:
    """Exports ``model`` on ``example`` (one micro-batch) and annotates its blocks. A half
    model (``half``) is traced in float32 and its graph converted to float16."""
    import onnx
    register_symbolics()
    if half:
        example = tuple(t.float() if t.is_floating_point() else t for t in example)
    saved = {k: v.clone() for k, v in model.state_dict().items()}  # tracing runs forward
    with _in_float32(model, half), _tracing(model, training), torch.no_grad(), \
            warnings.catch_warnings():
        # a traced shape check (mse_loss's) is constant for the compiled shapes, as intended
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # BatchNorm's step counter is not exported; the compiler updates its statistics
        warnings.filterwarnings("ignore", "ONNX Preprocess - Removing mutation")
        # the memory controls' markers (memory.py) and PopTorch's ops (ops.py) are
        # custom-domain nodes torch.onnx cannot infer; their symbolics set the types
        warnings.filterwarnings("ignore", "The shape inference of ai.graphcore")
        # ... and so are custom ops (custom_ops.py), whose symbolic sets the types too
        warnings.filterwarnings("ignore", "The shape inference of .* type is missing")
        warnings.filterwarnings("ignore", ".*_graph_op' is deprecated", FutureWarning)
        # a model without inputs (PopTorch's CounterModel) is exported as it is
        warnings.filterwarnings("ignore", "No input args, skipping _decide_input_format")
        outputs: List[str] = []
        structure = _structure(model(*example), outputs)
        updated = {} if training else _updated_buffers(model, saved)
        buffer = io.BytesIO()
        mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
        with blocks.recording() as recorder, custom_ops.recording() as custom, \
                _returning_buffers(model, list(updated)), _keeping_every_weight():
            torch.onnx.export(model, example, buffer, input_names=names,
                              output_names=outputs + list(updated.values()),
                              opset_version=OPSET, do_constant_folding=False, training=mode)
        model.load_state_dict(saved)
    proto = onnx.load_from_string(buffer.getvalue())
    custom_ops.declare(proto, custom)
    from ipupod.poptorch import memory  # imports this module
    memory.apply_markers(proto)
    if half:
        _to_float16(proto)
    ipus = blocks.annotate(proto, recorder.blocks, strategy)
    state = module_state(model, proto)
    _declare(proto, state)
    weights = set(model.state_dict())
    return Exported(onnx=proto.SerializeToString(), inputs=names, outputs=outputs,
                    structure=structure, scalar_outputs=_scalars(proto), block_ipus=ipus,
                    weights=[i.name for i in proto.graph.initializer if i.name in weights],
                    buffers=updated, aliases=state.aliases)


def _updated_buffers(model: torch.nn.Module, saved: Dict[str, torch.Tensor]) -> Dict[str, str]:
    """The buffers one forward changed in place (PopTorch 4.8: an inference model keeps
    them from run to run), each with the name of the output that will carry its new
    value."""
    return {name: f"ipupod_buffer/{name}" for name, value in model.named_buffers()
            if name in saved and not torch.equal(value, saved[name])}


@contextlib.contextmanager
def _returning_buffers(model: torch.nn.Module, names: List[str]) -> Iterator[None]:
    """While exporting, the forward also returns these buffers' new values (after the
    model's own outputs), so each is an ONNX output the compiler pairs with its buffer."""
    if not names:
        yield
        return
    forward = model.forward

    def with_buffers(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        return (out,) + tuple(model.get_buffer(n) for n in names)
    model.forward = with_buffers  # type: ignore[assignment]
    try:
        yield
    finally:
        del model.forward


def _scalars(proto: Any) -> List[str]:
    return [o.name for o in proto.graph.output
            if o.type.tensor_type.HasField("shape") and not o.type.tensor_type.shape.dim]


def loss_name(exported: Exported) -> str:
    """The output to train on: the only scalar, else the last scalar output."""
    if not exported.scalar_outputs:
        raise ValueError("trainingModel needs the model to return its loss, a scalar: "
                         "`return output, loss` (poptorch.identity_loss makes a custom one)")
    return exported.scalar_outputs[-1]


def frozen(model: torch.nn.Module, exported: Exported) -> List[str]:
    """Parameters with ``requires_grad`` False (PopTorch does not train them)."""
    parameters = dict(model.named_parameters())
    return [n for n in exported.weights if n in parameters and not parameters[n].requires_grad]
