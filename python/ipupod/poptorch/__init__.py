"""``ipupod.poptorch``: PopTorch's user-facing API on an ipupod pod.

Scripts written for PopTorch run with ``import ipupod.poptorch as poptorch`` in place of
``import poptorch``::

    import torch
    import ipupod.poptorch as poptorch

    opts = poptorch.Options().deviceIterations(2)
    training_model = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9))
    output, loss = training_model(x, target)    # exported, compiled on the server, run
    training_model.copyWeightsToHost()          # the trained weights, in `model`

The server is ``$IPUPOD_SERVER`` (else 127.0.0.1:50051) with ``$IPUPOD_TOKEN``, as for the
CLI, unless ``Options.server(...)`` names one. Errors are ipupod's, under PopTorch's names:
``poptorch.Error``, ``poptorch.RecoverableError`` (``recovery_action``),
``poptorch.UnrecoverableError``. PopTorch's names ipupod does not provide raise
``poptorch.Error`` saying why and what to use instead (``poptorch.for_loop``, ...). Compile
warnings of the server reach the script as :class:`PoptorchWarning`; the ``poptorch`` logger
(``setLogLevel``, ``$POPTORCH_LOG_LEVEL``) says what the front end does. docs/python.md
("PopTorch scripts") is the guide and docs/differences.md lists what differs from PopTorch.
"""

from typing import Any

import torch

from ipupod import __version__ as _ipupod_version
from ipupod.client import Client as _Client  # not a name of PopTorch's namespace
from ipupod.errors import Error, RecoverableError, UnrecoverableError
from ipupod.poptorch import enums, optim
from ipupod.poptorch._support import PoptorchWarning, isRunningOnIpu, not_modelled, setLogLevel
from ipupod.poptorch.attributes import Attribute
from ipupod.poptorch.blocks import (BeginBlock, Block, BlockFunction, ParallelPhasedExecution,
                                    Phase, PipelinedExecution, SerialPhasedExecution,
                                    ShardedExecution, Stage)
from ipupod.poptorch.custom_ops import custom_op
from ipupod.poptorch.data import AsynchronousDataAccessor, DataLoader, DataLoaderMode
from ipupod.poptorch.enums import (AutoStage, CommGroupType, ConnectionType,
                                   HalfFloatCastingBehavior, Liveness, MatMulSerializationMode,
                                   MeanReductionStrategy, MultiConvPlanType, OutputMode,
                                   OverlapMode, ReductionType, SharingStrategy, SyncPattern,
                                   VariableRetrievalMode)
from ipupod.poptorch.executor import (PoplarExecutor, inferenceModel, load,
                                      registerPostCompileHook, registerPreCompileHook,
                                      trainingModel)
from ipupod.poptorch.export import identity_loss
from ipupod.poptorch.memory import recomputationCheckpoint, serializedMatMul, set_available_memory
from ipupod.poptorch.multiconv import MultiConv
from ipupod.poptorch.ops import (ctc_beam_search_decoder, dynamic_slice, dynamic_update,
                                 ipu_print_tensor, nop)
from ipupod.poptorch.options import ConfigFileError, Options, TensorLocationSettings

#: The IPU version ipupod simulates: the GC200 is a Mk2 IPU (PopTorch answers 2 for it).
IPU_HARDWARE_VERSION = 2
__version__ = _ipupod_version


def ipuHardwareVersion() -> int:  # noqa: N802 - PopTorch's name
    """2: the configured server's pod is of GC200s, Mk2 IPUs. Raises ``poptorch.Error``
    (UNAVAILABLE) when no server answers, as PopTorch raises without IPU hardware."""
    with _Client(timeout=10.0) as client:
        client.pod_info()
    return IPU_HARDWARE_VERSION


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802 - PopTorch's name
    """Whether the configured server (``$IPUPOD_SERVER``, ``$IPUPOD_TOKEN``) has a device of
    ``num_ipus`` IPUs: a power of two no larger than its pod. Like PopTorch, it does not ask
    whether they are free; False when no server answers."""
    if isinstance(num_ipus, bool) or not isinstance(num_ipus, int) or num_ipus < 1 or \
            num_ipus & (num_ipus - 1):
        return False
    try:
        with _Client(timeout=10.0) as client:
            pod = client.pod_info().pod
    except Error:
        return False
    return num_ipus <= pod.num_ipus


def createPoptorchError(message: str) -> Error:  # noqa: N802 - PopTorch's name
    """A ``poptorch.Error`` with this message (for code that raises PopTorch's errors)."""
    return Error(message, type="client.application", location="python")


def _replica_grouping(self: Any, *args: Any, **kwargs: Any) -> None:
    """PopTorch's ``Parameter.replicaGrouping`` (4.4.3), which ipupod does not model."""
    raise not_modelled("replicaGrouping", "ipupod's replicas hold one copy of every weight "
                       "and apply the same all-reduced update to it, so a weight cannot take a "
                       "different value per group of replicas; keep one parameter per group "
                       "in the model instead", owner="Parameter")


if not hasattr(torch.nn.Parameter, "replicaGrouping"):
    torch.nn.Parameter.replicaGrouping = _replica_grouping  # as PopTorch adds it

_NOT_YET = "is not modelled yet (another part of issue 28 adds it)"
#: PopTorch's public names ipupod.poptorch does not provide: why, and what to use instead.
_NOT_MODELLED = {
    "for_loop": "is not modelled: ONNX Loop is not among the ops ipupod compiles; unroll the "
                "loop in Python (the export traces it)",
    "cond": "is not modelled: ONNX If is not among the ops ipupod compiles; compute both "
            "branches and select with torch.where",
    "set_overlap_for_input": "is not modelled: ipupod has no IO tiles; remove the call (it "
                             "changes no results)",
    "set_overlap_for_output": "is not modelled: ipupod has no IO tiles; remove the call (it "
                              "changes no results)",
    "CPU": "is not modelled: every op of the exported model runs on the simulated IPUs; "
           "run the host part before or after calling the model",
    "fps": "is not modelled (PopTorch Geometric's farthest point sampling); compute it on "
           "the host",
    "nearest": "is not modelled (PopTorch Geometric's nearest-neighbour search); compute it "
               "on the host",
    "NameScope": "is not modelled: the export names nodes as torch.onnx does; remove the "
                 "context manager",
    "removeBlocks": "is not modelled; wrap a fresh copy of the module without BeginBlock",
    "ICustomArgParser": "is not modelled: the front end takes tensors (positional and "
                        "keyword); pass the tensors of your structure as arguments",
    "registerCustomArgParser": "is not modelled: the front end takes tensors (positional and "
                               "keyword); pass the tensors of your structure as arguments",
    "accessAttributes": "is not modelled (a PopTorch internal of the dispatcher)",
    "getIpuTensorId": "is not modelled (a PopTorch internal of the dispatcher)",
    "importPoptorchMetadataFromFile": "is not modelled: poptorch.load reads ipupod's "
                                      "compileAndExport files",
    "profiling": "is not modelled: ipupod writes no PopVision traces; the compile report "
                 "(Client.compile(report=True)) and getPerfCounters() give the simulated time",
}


def __getattr__(name: str) -> Any:
    """``poptorch.X`` for a PopTorch name ipupod does not provide: ``poptorch.Error`` saying
    why and what to use instead (an unknown name stays an AttributeError)."""
    if name in _NOT_MODELLED:
        raise not_modelled(name, f"it {_NOT_MODELLED[name]}")
    raise AttributeError(f"module 'ipupod.poptorch' has no attribute '{name}'")


__all__ = [
    "AsynchronousDataAccessor",
    "Attribute",
    "AutoStage",
    "BeginBlock",
    "Block",
    "BlockFunction",
    "CommGroupType",
    "ConfigFileError",
    "ConnectionType",
    "DataLoader",
    "DataLoaderMode",
    "Error",
    "HalfFloatCastingBehavior",
    "Liveness",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "MultiConv",
    "MultiConvPlanType",
    "Options",
    "OutputMode",
    "OverlapMode",
    "ParallelPhasedExecution",
    "Phase",
    "PipelinedExecution",
    "PoplarExecutor",
    "PoptorchWarning",
    "RecoverableError",
    "ReductionType",
    "SerialPhasedExecution",
    "ShardedExecution",
    "SharingStrategy",
    "Stage",
    "SyncPattern",
    "TensorLocationSettings",
    "UnrecoverableError",
    "VariableRetrievalMode",
    "createPoptorchError",
    "ctc_beam_search_decoder",
    "custom_op",
    "dynamic_slice",
    "dynamic_update",
    "enums",
    "identity_loss",
    "inferenceModel",
    "ipuHardwareIsAvailable",
    "ipuHardwareVersion",
    "ipu_print_tensor",
    "isRunningOnIpu",
    "load",
    "nop",
    "optim",
    "recomputationCheckpoint",
    "registerPostCompileHook",
    "registerPreCompileHook",
    "serializedMatMul",
    "setLogLevel",
    "set_available_memory",
    "trainingModel",
]
