"""PopTorch's model annotations (``BeginBlock``, ``Block``, ``BlockFunction``) and execution
strategies (``PipelinedExecution``, ``ShardedExecution`` with ``Stage`` / ``AutoStage``),
mapped to ipupod's placement: PopART's ``__ipu_number`` / ``__pipeline_stage`` node
attributes, which the compiler reads from the ONNX model.

While a model is exported (:func:`recording`), entering a block pushes a tracing scope named
``__ipupod_block_<n>``, so torch.onnx puts that name into the names of the block's nodes
("/__ipupod_block_1/layer2/Gemm"). :func:`annotate` then walks the exported nodes in order:
a node inside a block takes the block's IPU (the innermost block wins), any other node
inherits the placement of the node before it - PopTorch's rule that layers between
``BeginBlock`` annotations belong to the previous block. Outside an export the annotations do
nothing, so the model still runs on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch

_MARKER = re.compile(r"/__ipupod_block_(\d+)(?=/)")
_PLACEMENT_ATTRIBUTES = ("__ipu_number", "__pipeline_stage")


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


_recorder: Optional[_Recorder] = None


@contextlib.contextmanager
def recording() -> Iterator[_Recorder]:
    """Records the blocks entered while a model is exported (not reentrant)."""
    global _recorder
    _recorder = _Recorder()
    try:
        yield _recorder
    finally:
        _recorder = None


def _enter(info: BlockInfo) -> bool:
    """Pushes the block's tracing scope when exporting; True when it did."""
    state = torch._C._get_tracing_state()
    if _recorder is None or state is None:
        return False
    if info.user_id is None and _recorder.auto_id:
        info = BlockInfo(str(_recorder.next_auto_id), info.ipu_id)
        _recorder.next_auto_id += 1
    _recorder.blocks.append(info)
    state.push_scope(f"IpupodBlock::__ipupod_block_{len(_recorder.blocks) - 1}")
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
        """Blocks without a ``user_id`` are named "0", "1", ... in the order they run."""
        if _recorder is not None:
            _recorder.auto_id = True

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


class AutoStage(enum.Enum):
    """How blocks become pipeline stages when no ``Stage`` names them."""

    SameAsIpu = 0
    AutoIncrement = 1


class Stage:
    """Blocks (by ``user_id``) that run together as one pipeline stage; ``.ipu(n)`` places
    the stage."""

    def __init__(self, *block_ids: Union[str, int]) -> None:
        self.block_ids = [str(b) for b in block_ids]
        self.ipu_id: Optional[int] = None

    def ipu(self, ipu_id: int) -> "Stage":
        """Places the stage on IPU ``ipu_id`` of each replica."""
        self.ipu_id = _info(None, ipu_id).ipu_id
        return self


class ExecutionStrategy:
    """Common to the strategies ipupod models: stages, or an ``AutoStage`` rule."""

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

    def stage(self, index: int) -> Stage:
        """The ``index``-th stage given to the strategy."""
        return self.stages[index]

    def placement(self, block: BlockInfo, order: int) -> Tuple[int, Optional[int]]:
        """(IPU, pipeline stage or None = the IPU) of a block, the ``order``-th met."""
        for index, stage in enumerate(self.stages):
            if block.user_id is not None and block.user_id in stage.block_ids:
                ipu = stage.ipu_id if stage.ipu_id is not None else block.ipu_id
                if ipu is None:
                    raise ValueError(f"Stage {stage.block_ids} has no IPU: use "
                                     f"Stage(...).ipu(n) or give the block an ipu_id")
                return ipu, index
        if block.ipu_id is None:
            raise ValueError(f"block '{block.user_id}' has no ipu_id and no Stage of the "
                             f"execution strategy names it")
        stage = order if self.auto_stage == AutoStage.AutoIncrement else None
        return block.ipu_id, stage


class PipelinedExecution(ExecutionStrategy):
    """PopTorch's default: stages on consecutive IPUs, micro-batches flowing through them."""


class ShardedExecution(ExecutionStrategy):
    """Inference: one micro-batch at a time through the IPUs in turn (no pipeline)."""


def annotate(model: Any, blocks: List[BlockInfo], strategy: ExecutionStrategy) -> int:
    """Writes ``__ipu_number`` (and ``__pipeline_stage`` when a stage is set) on every node
    of an exported ``onnx.ModelProto``; returns the IPUs used (0 when the model has no
    blocks: then the compiler places it by its IPUConfig)."""
    if not blocks:
        return 0
    placements: Dict[int, Tuple[int, Optional[int]]] = {}
    current: Tuple[int, Optional[int]] = (0, None)
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


def _set_placement(node: Any, placement: Tuple[int, Optional[int]]) -> None:
    from onnx import helper
    kept = [a for a in node.attribute if a.name not in _PLACEMENT_ATTRIBUTES]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("__ipu_number", placement[0]))
    if placement[1] is not None:
        node.attribute.append(helper.make_attribute("__pipeline_stage", placement[1]))
