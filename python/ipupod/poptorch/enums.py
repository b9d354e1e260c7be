"""``poptorch.enums``: PopTorch's enumerations, with PopTorch's names and values.

Every one is defined here, as in PopTorch (``OutputMode``, ``MatMulSerializationMode`` and
``AutoStage`` too, which :mod:`~ipupod.poptorch.options`, :mod:`~ipupod.poptorch.memory`
and :mod:`~ipupod.poptorch.blocks` use); this module imports nothing of the front end, so
every module may import it.
"""

from __future__ import annotations

import enum


class OutputMode(enum.Enum):
    """Which micro-batches' results a call returns (PopTorch's ``OutputMode``)."""

    All = "all"
    Final = "final"
    Sum = "sum"
    EveryN = "every_n"
    Default = "default"


class MatMulSerializationMode(enum.Enum):
    """PopTorch's ``poptorch.MatMulSerializationMode``."""

    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class AutoStage(enum.Enum):
    """How blocks become pipeline stages when no ``Stage`` names them."""

    SameAsIpu = 0
    AutoIncrement = 1


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
