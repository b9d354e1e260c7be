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
``poptorch.UnrecoverableError``. docs/python.md ("PopTorch scripts") is the guide and
docs/differences.md lists what differs from PopTorch.
"""

from ipupod.errors import Error, RecoverableError, UnrecoverableError
from ipupod.poptorch import optim
from ipupod.poptorch.blocks import (AutoStage, BeginBlock, Block, BlockFunction,
                                    PipelinedExecution, ShardedExecution, Stage)
from ipupod.poptorch.executor import PoplarExecutor, inferenceModel, load, trainingModel
from ipupod.poptorch.export import identity_loss, isRunningOnIpu
from ipupod.poptorch.memory import MatMulSerializationMode, serializedMatMul, set_available_memory
from ipupod.poptorch.ops import dynamic_slice, dynamic_update, ipu_print_tensor, nop
from ipupod.poptorch.options import Options, OutputMode

__all__ = [
    "AutoStage",
    "BeginBlock",
    "Block",
    "BlockFunction",
    "Error",
    "MatMulSerializationMode",
    "Options",
    "OutputMode",
    "PipelinedExecution",
    "PoplarExecutor",
    "RecoverableError",
    "ShardedExecution",
    "Stage",
    "UnrecoverableError",
    "dynamic_slice",
    "dynamic_update",
    "identity_loss",
    "inferenceModel",
    "ipu_print_tensor",
    "isRunningOnIpu",
    "load",
    "nop",
    "optim",
    "serializedMatMul",
    "set_available_memory",
    "trainingModel",
]
