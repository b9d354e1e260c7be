"""PopTorch's model annotations (``BeginBlock``, ``Block``, ``BlockFunction``) and execution
strategies (``PipelinedExecution``, ``ShardedExecution`` with ``Stage`` / ``AutoStage``;
``SerialPhasedExecution``, ``ParallelPhasedExecution`` with ``Phase`` and ``Liveness``),
mapped to ipupod's placement: PopART's ``__ipu_number`` / ``__pipeline_stage`` /
``__execution_phase`` node attributes, which the compiler reads from the ONNX model.

While a model is exported (:func:`recording`), entering a block pushes a tracing scope named
``__ipupod_block_<n>``, so torch.onnx puts that name into the names of the block's nodes
("/__ipupod_block_1/layer2/Gemm"). :func:`annotate` then walks the exported nodes in order:
a node inside a block takes the block's IPU (the innermost block wins), any other node
inherits the placement of the node before it - PopTorch's rule that layers between
``BeginBlock`` annotations belong to the previous block. Outside an export the annotations do
nothing, so the model still runs on the CPU.

A block without ``user_id`` is named "0", "1", ... in the order blocks start, as PopTorch
names them (``Block.useAutoId()`` starts the count again). Phased strategies place each block
by the ``Stage`` of a ``Phase`` that names it: the stage's IPU (else the block's ``ipu_id``)
and the phase's index become ``__ipu_number`` and ``__execution_phase``; the strategy's kind
and ``Liveness`` reach the compiler as the IPUConfig keys ``execution_strategy`` and
``tensors_liveness`` (:meth:`ExecutionStrategy.compile_sets`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

from ipupod.poptorch.enums import AutoStage, Liveness
from ipupod.poptorch._support import ExportRecording, option_error

_MARKER = re.compile(r"/__ipupod_block_(\d+)(?=/)")
_PLACEMENT_ATTRIBUTES = ("__ipu_number", "__pipeline_stage", "__execution_phase")
#: (IPU, pipeline stage or None, execution phase or None) of a block.
Placement = Tuple[int, Optional[int], Optional[int]]


@dataclasses.dataclass(frozen=True)
class BlockInfo:
    """One block as annotated: its ``user_id`` (a name, or None) and ``ipu_id`` (or None)."""

    user_id: Optional[str]
    ipu_id: Optional[int]


class _Recorder:
    """The blocks met during one export, in the order their scopes were entered."""

    def __init__(self) -> None:
        self.blocks: List[BlockInfo] = []
        self.auto_id = False
        self.next_auto_id = 0


_recording = ExportRecording(_Recorder)
#: Records the blocks entered while a model is exported (not reentrant).
recording = _recording.recording


def _enter(info: BlockInfo) -> bool:
    """Pushes the block's tracing scope when exporting; True when it did."""
    state = torch._C._get_tracing_state()
    if _recording.current is None or state is None:
        return False
    if info.user_id is None:
        info = BlockInfo(str(_recording.current.next_auto_id), info.ipu_id)
        _recording.current.next_auto_id += 1
    _recording.current.blocks.append(info)
    state.push_scope(f"IpupodBlock::__ipupod_block_{len(_recording.current.blocks) - 1}")
    return True


def _leave() -> None:
    state = torch._C._get_tracing_state()
    if state is not None:
        state.pop_scope()


def _info(user_id: Union[None, str, int], ipu_id: Optional[int]) -> BlockInfo:
    if ipu_id is not None and (isinstance(ipu_id, bool) or not isinstance(ipu_id, int)
                               or ipu_id < 0):
        raise ValueError(f"ipu_id must be a non-negative integer, not {ipu_id!r}")
    return BlockInfo(None if user_id is None else str(user_id), ipu_id)


class Block:
    """A context manager: everything computed inside runs on ``ipu_id`` (or on the IPU a
    ``Stage`` naming ``user_id`` gives)."""

    def __init__(self, user_id: Union[None, str, int] = None, ipu_id: Optional[int] = None
                 ) -> None:
        self._info = _info(user_id, ipu_id)
        self._pushed: List[bool] = []

    @staticmethod
    def useAutoId() -> None:
        """Blocks without a ``user_id`` are named "0", "1", ... in the order they run, from
        here on ("0" again)."""
        if _recording.current is not None:
            _recording.current.auto_id = True
            _recording.current.next_auto_id = 0

    def __enter__(self) -> "Block":
        self._pushed.append(_enter(self._info))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._pushed.pop():
            _leave()


def BlockFunction(user_id: Union[None, str, int] = None,  # noqa: N802 - PopTorch's name
                  ipu_id: Optional[int] = None) -> Callable[[Callable], Callable]:
    """A decorator: the function's body runs in ``Block(user_id, ipu_id)``."""
    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return function(*args, **kwargs)
        return wrapper
    return decorate


class _BeginBlockHooks:
    """A module's forward hooks that make its calls a block (picklable, unlike closures)."""

    def __init__(self, info: BlockInfo) -> None:
        self.info = info
        self.pushed: List[bool] = []

    def before(self, module: torch.nn.Module, inputs: Any) -> None:
        self.pushed.append(_enter(self.info))

    def after(self, module: torch.nn.Module, inputs: Any, outputs: Any) -> None:
        if self.pushed and self.pushed.pop():
            _leave()


def BeginBlock(layer: torch.nn.Module, user_id: Union[None, str, int] = None,  # noqa: N802
               ipu_id: Optional[int] = None) -> torch.nn.Module:
    """Starts a block at ``layer``: the layer, and what runs after it until the next block,
    is placed on ``ipu_id``. Returns the layer itself (PopTorch's use:
    ``model.layer[2] = poptorch.BeginBlock(model.layer[2], ipu_id=1)``)."""
    if not isinstance(layer, torch.nn.Module):
        raise ValueError(f"BeginBlock takes a torch.nn.Module, not {type(layer).__name__}")
    hooks = _BeginBlockHooks(_info(user_id, ipu_id))
    layer.register_forward_pre_hook(hooks.before)
    layer.register_forward_hook(hooks.after)
    return layer


def _strategy_error(message: str, where: str) -> Exception:
    """``poptorch.Error`` (INVALID_ARGUMENT; also a ``ValueError``) for an annotation or
    strategy PopTorch rejects too."""
    return option_error(message, where)


class Stage:
    """Blocks (by ``user_id``) that run together on one IPU: one pipeline stage, or a part
    of a ``Phase``; ``.ipu(n)`` places the stage."""

    def __init__(self, *block_ids: Union[str, int]) -> None:
        self.block_ids = [str(b) for b in block_ids]
        self.ipu_id: Optional[int] = None
        self.phase_id: Optional[int] = None

    @property
    def blocks(self) -> List[str]:
        """The ``user_id`` of each block of the stage."""
        return list(self.block_ids)

    def ipu(self, ipu_id: int) -> "Stage":
        """Places the stage on IPU ``ipu_id`` of each replica."""
        self.ipu_id = _info(None, ipu_id).ipu_id
        return self


class ExecutionStrategy:
    """Common to the strategies ipupod models: stages, or an ``AutoStage`` rule."""

    #: The compiler's ``execution_strategy`` (None: the IPUConfig's choice).
    EXECUTION: Optional[str] = None

    def __init__(self, *args: Union[Stage, AutoStage, str]) -> None:
        self.stages: List[Stage] = []
        self.auto_stage = AutoStage.SameAsIpu
        for arg in args:
            if isinstance(arg, AutoStage):
                self.auto_stage = arg
            elif isinstance(arg, Stage):
                self.stages.append(arg)
            elif isinstance(arg, (str, int)):
                self.stages.append(Stage(arg))
            else:
                raise ValueError(f"{type(self).__name__} takes Stage, AutoStage or block ids, "
                                 f"not {arg!r}")

    def stage(self, block_id: Union[str, int]) -> Stage:
        """The stage block ``block_id`` belongs to (PopTorch's); an int is the index of a
        stage given to the strategy."""
        if isinstance(block_id, int) and not isinstance(block_id, bool):
            return self.stages[block_id]
        for stage in self.stages:
            if str(block_id) in stage.block_ids:
                return stage
        raise _strategy_error(f"Unknown block '{block_id}': the {type(self).__name__}'s stages "
                              f"name blocks {sorted(b for s in self.stages for b in s.block_ids)}",
                              f"{type(self).__name__}.stage")

    def placement(self, block: BlockInfo, order: int) -> Placement:
        """(IPU, pipeline stage or None = the IPU, phase) of a block, the ``order``-th met."""
        for index, stage in enumerate(self.stages):
            if block.user_id is not None and block.user_id in stage.block_ids:
                ipu = stage.ipu_id if stage.ipu_id is not None else block.ipu_id
                if ipu is None:
                    raise ValueError(f"Stage {stage.block_ids} has no IPU: use "
                                     f"Stage(...).ipu(n) or give the block an ipu_id")
                return ipu, index, None
        if block.ipu_id is None:
            raise ValueError(f"block '{block.user_id}' has no ipu_id and no Stage of the "
                             f"execution strategy names it")
        stage = order if self.auto_stage == AutoStage.AutoIncrement else None
        return block.ipu_id, stage, None

    def compile_sets(self, training: bool) -> List[str]:
        """The IPUConfig ``--set`` entries that select this strategy for the compiler."""
        return [f"execution_strategy={self.EXECUTION}"] if self.EXECUTION else []


class PipelinedExecution(ExecutionStrategy):
    """PopTorch's default: stages on consecutive IPUs, micro-batches flowing through them."""


class ShardedExecution(ExecutionStrategy):
    """One micro-batch at a time through the IPUs in turn (no pipeline); training runs the
    forward pass through the shards, then the backward pass back through them."""

    def compile_sets(self, training: bool) -> List[str]:
        # inference keeps optimum-graphcore's key (and the cache keys compiled with it)
        return ["execution_strategy=sharded"] if training else \
            ["sharded_execution_for_inference=true"]


class Phase:
    """One phase of a phased execution: stages that run at the same time, each on its IPU
    (``Phase(Stage("A").ipu(0), Stage("B").ipu(1))``), or block ids making one stage
    (``Phase("A", "B")``)."""

    def __init__(self, *arg: Union[str, int, Stage]) -> None:
        if not arg:
            raise _strategy_error("Phase needs stages or block ids", "Phase")
        if all(isinstance(a, Stage) for a in arg):
            self.stages: List[Stage] = list(arg)  # type: ignore[arg-type]
        elif all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in arg):
            self.stages = [Stage(*arg)]  # type: ignore[arg-type]
        else:
            raise _strategy_error(f"All arguments of a Phase must either be block IDs or "
                                  f"Stages, not {[type(a).__name__ for a in arg]}", "Phase")

    def stage(self, idx: int) -> Stage:
        """The phase's ``idx``-th stage."""
        return self.stages[idx]

    def ipus(self, *ipus: int) -> "Phase":
        """One IPU for each stage of the phase, in order."""
        if len(ipus) != len(self.stages):
            raise _strategy_error(f"Phase contains {len(self.stages)} stages but you provided "
                                  f"{len(ipus)} IPUs: give one IPU per stage", "Phase.ipus")
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(ipu)
        return self


def _as_phase(arg: Any, where: str) -> Phase:
    """PopTorch's forms of a phase: a Phase, a Stage, a block id, or a list of either."""
    if isinstance(arg, Phase):
        return arg
    if isinstance(arg, AutoStage):
        raise _strategy_error("There is no AutoStage for phased execution (nor in PopTorch): "
                              "give the phases explicitly, e.g. "
                              "SerialPhasedExecution(Phase(Stage(\"A\")), Phase(Stage(\"B\")))",
                              where)
    if isinstance(arg, (list, tuple)):
        return Phase(*arg)
    return Phase(arg)


class _PhasedExecution(ExecutionStrategy):
    """Common to PopTorch's phased strategies: phases, each of stages, with a Liveness."""

    def __init__(self, *phases: Union[Phase, Stage, str, List[Any]]) -> None:
        where = type(self).__name__
        super().__init__()
        if not phases:
            raise _strategy_error("There is currently no AutoStage for phased execution: "
                                  "specify the phases explicitly", where)
        self.phases: List[Phase] = []
        self.liveness = Liveness.AlwaysLive
        self.separate_backward_phase = False
        self._blocks: Dict[str, Stage] = {}
        for phase_id, arg in enumerate(phases):
            phase = _as_phase(arg, where)
            for stage in phase.stages:
                stage.phase_id = phase_id
                for block in stage.block_ids:
                    if block in self._blocks:
                        raise _strategy_error(f"block '{block}' is associated with more than "
                                              f"one stage", where)
                    self._blocks[block] = stage
            self.phases.append(phase)
            self.stages.extend(phase.stages)

    def phase(self, phase: int) -> Phase:
        """The ``phase``-th phase."""
        if isinstance(phase, bool) or not isinstance(phase, int) or phase < 0:
            raise _strategy_error(f"Phases are identified by non-negative integers, not "
                                  f"{phase!r}", f"{type(self).__name__}.phase")
        if phase >= len(self.phases):
            raise _strategy_error(f"phase {phase} does not exist: the strategy has "
                                  f"{len(self.phases)} phases", f"{type(self).__name__}.phase")
        return self.phases[phase]

    def useSeparateBackwardPhase(self, use: bool = True) -> "_PhasedExecution":  # noqa: N802
        """PopTorch's choice of whether the last forward phase and the first backward phase
        are one phase; accepted, with no effect on ipupod's plan (docs/differences.md)."""
        if not isinstance(use, bool):
            raise _strategy_error(f"useSeparateBackwardPhase takes a bool, not {use!r}",
                                  f"{type(self).__name__}.useSeparateBackwardPhase")
        self.separate_backward_phase = use
        return self

    def placement(self, block: BlockInfo, order: int) -> Placement:
        stage = self._blocks.get(block.user_id) if block.user_id is not None else None
        if stage is None:
            raise _strategy_error(f"Unknown block '{block.user_id}': no Stage of the "
                                  f"{type(self).__name__}'s phases names it (they name "
                                  f"{sorted(self._blocks)}); add it to a Stage of a Phase",
                                  type(self).__name__)
        ipu = stage.ipu_id if stage.ipu_id is not None else block.ipu_id
        if ipu is None:
            raise _strategy_error(f"block '{block.user_id}' (phase {stage.phase_id}) has no "
                                  f"IPU: place its Stage (Stage(...).ipu(n) or "
                                  f"strategy.phase({stage.phase_id}).ipus(...)) or give the "
                                  f"block an ipu_id", type(self).__name__)
        return ipu, None, stage.phase_id

    def compile_sets(self, training: bool) -> List[str]:
        return [f"execution_strategy={self.EXECUTION}",
                f"tensors_liveness={_LIVENESS_NAMES[self.liveness]}"]


_LIVENESS_NAMES = {
    Liveness.AlwaysLive: "always_live",
    Liveness.OffChipAfterFwd: "off_chip_after_fwd",
    Liveness.OffChipAfterFwdNoOverlap: "off_chip_after_fwd_no_overlap",
    Liveness.OffChipAfterEachPhase: "off_chip_after_each_phase",
}


class SerialPhasedExecution(_PhasedExecution):
    """Every phase runs on one group of IPUs, one phase after another; weights and
    activations move to and from streaming memory between phases as the ``Liveness`` says."""

    EXECUTION = "serial_phased"

    def setTensorsLiveness(self, liveness: Liveness) -> "SerialPhasedExecution":  # noqa: N802
        """What stays on the IPU between phases (``poptorch.Liveness``)."""
        if not isinstance(liveness, Liveness):
            raise _strategy_error(f"setTensorsLiveness takes a poptorch.Liveness, not "
                                  f"{liveness!r}", "SerialPhasedExecution.setTensorsLiveness")
        self.liveness = liveness
        return self


class ParallelPhasedExecution(_PhasedExecution):
    """Phases alternate between two groups of IPUs: even phases on even IPUs, odd phases on
    odd IPUs; one group computes while the other moves its tensors."""

    EXECUTION = "parallel_phased"

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True  # noqa: N802 - PopTorch's
                                   ) -> "ParallelPhasedExecution":
        """``Liveness.OffChipAfterFwd`` (True) or ``AlwaysLive`` (False)."""
        if not isinstance(off_chip, bool):
            raise _strategy_error(f"sendTensorsOffChipAfterFwd takes a bool, not {off_chip!r}",
                                  "ParallelPhasedExecution.sendTensorsOffChipAfterFwd")
        self.liveness = Liveness.OffChipAfterFwd if off_chip else Liveness.AlwaysLive
        return self


def annotate(model: Any, blocks: List[BlockInfo], strategy: ExecutionStrategy) -> int:
    """Writes ``__ipu_number`` (and ``__pipeline_stage`` when a stage is set,
    ``__execution_phase`` for a phased strategy) on every node of an exported
    ``onnx.ModelProto``; returns the IPUs used (0 when the model has no blocks: then the
    compiler places it by its IPUConfig)."""
    if not blocks:
        if isinstance(strategy, _PhasedExecution):
            raise _strategy_error(f"{type(strategy).__name__} places the model's blocks, but the "
                                  f"model has none: annotate it with poptorch.Block or "
                                  f"BeginBlock", type(strategy).__name__)
        return 0
    placements: Dict[int, Placement] = {}
    current: Placement = (0, None, 0 if isinstance(strategy, _PhasedExecution) else None)
    used = set()
    for node in model.graph.node:
        markers = _MARKER.findall(node.name)
        if markers:
            index = int(markers[-1])
            if index not in placements:
                placements[index] = strategy.placement(blocks[index], len(placements))
            current = placements[index]
        _set_placement(node, current)
        used.add(current[0])
    return max(used) + 1


def _set_placement(node: Any, placement: Placement) -> None:
    from onnx import helper
    kept = [a for a in node.attribute if a.name not in _PLACEMENT_ATTRIBUTES]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("__ipu_number", placement[0]))
    if placement[1] is not None:
        node.attribute.append(helper.make_attribute("__pipeline_stage", placement[1]))
    if placement[2] is not None:
        node.attribute.append(helper.make_attribute("__execution_phase", placement[2]))
