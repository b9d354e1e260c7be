"""``poptorch.enums``: PopTorch's enumerations, with PopTorch's names and values.

``OutputMode``, ``MatMulSerializationMode`` and ``AutoStage`` are defined next to what uses
them (:mod:`~ipupod.poptorch.options`, :mod:`~ipupod.poptorch.memory`,
:mod:`~ipupod.poptorch.blocks`); this module imports nothing of the front end, so every
module may import it.
"""

from __future__ import annotations

import enum


class MeanReductionStrategy(enum.IntEnum):
    """When a mean reduction divides: ``Running`` (keep the running mean), ``Post`` (divide
    after summing), ``PostAndLoss`` (deprecated)."""

    Running = 0
    Post = 1
    PostAndLoss = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` reads its dataset: ``Sync`` (in the iterating loop),
    ``Async`` (ahead of it, through an ``AsynchronousDataAccessor``), ``AsyncRebatched``
    (``Async``, the accessor building the combined batches from smaller ones)."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How PopTorch hands the dataset to its loading process: ``SharedMemory``,
    ``FileSystem``, ``Fork``, ``ForkServer``."""

    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class ConnectionType(enum.IntEnum):
    """When to attach to the IPUs: ``Always`` (from the start), ``OnDemand`` (when the
    executable is ready to run), ``Never`` (offline compilation)."""

    Always = 0
    OnDemand = 1
    Never = 2


class HalfFloatCastingBehavior(enum.IntEnum):
    """Deprecated in PopTorch: ``HalfUpcastToFloat`` is the only behaviour."""

    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class ReductionType(enum.IntEnum):
    """How values are reduced: ``Sum``, ``Mean`` or ``NoReduction``."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class SyncPattern(enum.IntEnum):
    """How IPUs synchronise for host IO: ``Full``, ``SinglePipeline``, ``ReplicaAndLadder``."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class Liveness(enum.IntEnum):
    """Where tensors live between the phases of a phased execution."""

    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class OverlapMode(enum.Enum):
    """How far ahead the host preloads a tensor onto IO tiles."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class MultiConvPlanType(enum.IntEnum):
    """How a ``poptorch.MultiConv`` runs its convolutions: ``Parallel`` or ``Serial``."""

    Parallel = 0
    Serial = 1


class CommGroupType(enum.IntEnum):
    """How replicas are grouped for an input or a per-replica variable: ``All``,
    ``Consecutive``, ``Orthogonal``, ``NoGrouping``."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    """Which replicas' values of a grouped variable are read back: ``OnePerGroup`` or
    ``AllReplicas``."""

    OnePerGroup = 0
    AllReplicas = 2


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """PopTorch's ``poptorch.enums.OutputMode``, ``MatMulSerializationMode`` and
    ``AutoStage``: the front end's own classes, looked up when named (they live in modules
    that import this one)."""
    if name == "OutputMode":
        from ipupod.poptorch.options import OutputMode
        return OutputMode
    if name == "MatMulSerializationMode":
        from ipupod.poptorch.memory import MatMulSerializationMode
        return MatMulSerializationMode
    if name == "AutoStage":
        from ipupod.poptorch.blocks import AutoStage
        return AutoStage
    raise AttributeError(f"module 'poptorch.enums' has no attribute '{name}'")
