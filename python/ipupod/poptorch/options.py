"""``poptorch.Options``: PopTorch's options, turned into an optimum-graphcore IPUConfig and
the IPUConfig ``--set`` overrides ipupod's compiler takes.

PopTorch's setters (``deviceIterations``, ``replicationFactor``,
``Training.gradientAccumulation``, ``outputMode``, ``autoRoundNumIPUs``, ...) override the
keys of an IPUConfig given with :meth:`Options.ipuConfig`; the server and identity are found
as the CLI finds them (``$IPUPOD_SERVER``, ``$IPUPOD_TOKEN``) unless :meth:`Options.server`
names them.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import sys
import types
from typing import Any, Dict, List, Mapping, Optional, Set, Union

import grpc

from ipupod.errors import Error
from ipupod.poptorch import blocks, enums
from ipupod.poptorch._support import OptionError, logger, not_modelled, option_error, warn
from ipupod.poptorch.blocks import ExecutionStrategy, PipelinedExecution
from ipupod.poptorch.enums import OutputMode


class _TrainingOptions:
    """``opts.Training``: the training options PopTorch keeps apart."""

    def __init__(self) -> None:
        self.gradient_accumulation = 1
        self.auto_loss_scaling = False
        self.reduction_type = enums.ReductionType.Mean
        self.mean_reduction_strategy: Optional[enums.MeanReductionStrategy] = None
        self.convolution_dithering: Optional[bool] = None

    def gradientAccumulation(self, steps: int) -> "_TrainingOptions":
        """Micro-batches whose gradients are summed into one weight update."""
        self.gradient_accumulation = _positive(steps, "Training.gradientAccumulation")
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> "_TrainingOptions":
        """The loss scale starts at the optimizer's ``loss_scaling`` and moves by factors of
        2 after every update (IPUConfig ``auto_loss_scaling``; docs/differences.md)."""
        self.auto_loss_scaling = bool(enabled)
        return self

    def accumulationAndReplicationReductionType(  # noqa: N802
            self, reduction_type: enums.ReductionType) -> "_TrainingOptions":
        """How the gradients of a weight update's micro-batches and replicas combine:
        ``ReductionType.Mean`` (PopTorch's default) is what ipupod's compiler does.
        ``Sum`` raises ``poptorch.Error``: the compiler has no summed reduction (multiply the
        loss by gradientAccumulation x replicationFactor for summed gradients);
        ``NoReduction`` is refused, as in PopTorch."""
        where = "Options.Training.accumulationAndReplicationReductionType"
        if not isinstance(reduction_type, enums.ReductionType) or \
                reduction_type == enums.ReductionType.NoReduction:
            raise option_error(f"{where} takes poptorch.ReductionType.Mean or "
                               f"poptorch.ReductionType.Sum, not {reduction_type!r}", where)
        if reduction_type == enums.ReductionType.Sum:
            raise option_error(
                f"{where}(poptorch.ReductionType.Sum) is not modelled: ipupod's compiler "
                f"always averages the gradients of a weight update's micro-batches and "
                f"replicas (ReductionType.Mean, PopTorch's default); for summed gradients "
                f"multiply the loss by gradientAccumulation x replicationFactor", where,
                not_modelled=True)
        self.reduction_type = reduction_type
        return self

    def setMeanAccumulationAndReplicationReductionStrategy(  # noqa: N802
            self, mean_reduction_strategy: enums.MeanReductionStrategy) -> "_TrainingOptions":
        """When a Mean reduction divides (``Running``, ``Post``, ``PostAndLoss``): accepted;
        ipupod sums the gradients in float64 and divides once, which each strategy
        approximates in float32, so the choice changes nothing here."""
        if not isinstance(mean_reduction_strategy, enums.MeanReductionStrategy):
            where = "Options.Training.setMeanAccumulationAndReplicationReductionStrategy"
            raise option_error(f"{where} takes a poptorch.MeanReductionStrategy, not "
                               f"{mean_reduction_strategy!r}", where)
        self.mean_reduction_strategy = mean_reduction_strategy
        return self

    def setConvolutionDithering(self, enabled: bool) -> "_TrainingOptions":  # noqa: N802
        """Accepted without effect: dithering changes which tiles hold a convolution, which
        the simulated pod does not lay out (the results do not depend on it)."""
        self.convolution_dithering = bool(enabled)
        return self


class _PrecisionOptions:
    """``opts.Precision``: the partials of float16 matrix products and convolutions."""

    def __init__(self) -> None:
        self.half_partials: Optional[bool] = None  # None: PopTorch's default, float

    def setPartialsType(self, dtype: Any) -> "_PrecisionOptions":  # noqa: N802
        """torch.half: float16 models sum products in float16 partials (IPUConfig
        ``enable_half_partials``); torch.float (PopTorch's default): in float32."""
        import torch
        if dtype not in (torch.half, torch.float):
            raise ValueError(f"Precision.setPartialsType takes torch.half or torch.float, "
                             f"not {dtype!r}")
        self.half_partials = dtype == torch.half
        return self

    def enableFloatingPointExceptions(self, enabled: bool) -> "_PrecisionOptions":  # noqa: N802
        """False (PopTorch's default) is accepted; True raises ``poptorch.Error``: ipupod
        computes infinities and NaNs as the host does and never traps on them (check the
        outputs with ``torch.isfinite``)."""
        _check_bool(enabled, "Options.Precision.enableFloatingPointExceptions")
        if enabled:
            _not_modelled("Precision.enableFloatingPointExceptions(True)",
                          "the simulated IPU computes inf and NaN as the host does and never "
                          "raises on them; check the outputs with torch.isfinite instead")
        return self

    def enableStochasticRounding(self, enabled: bool) -> "_PrecisionOptions":  # noqa: N802
        """False is accepted; True raises ``poptorch.Error``: ipupod rounds float16 results to
        nearest even (docs/differences.md, "float16"), so stochastic rounding would change
        results silently."""
        _check_bool(enabled, "Options.Precision.enableStochasticRounding")
        if enabled:
            _not_modelled("Precision.enableStochasticRounding(True)",
                          "ipupod rounds to nearest even, deterministically; remove the call "
                          "or pass False")
        return self

    def halfFloatCasting(self, half_float_casting: Any) -> "_PrecisionOptions":  # noqa: N802
        """Deprecated in PopTorch, where only ``HalfUpcastToFloat`` remains: accepted with
        PopTorch's deprecation message; ipupod refuses mixed float16/float32 models anyway."""
        if not isinstance(half_float_casting, enums.HalfFloatCastingBehavior):
            raise option_error(f"Precision.halfFloatCasting takes a "
                               f"poptorch.HalfFloatCastingBehavior, not {half_float_casting!r}",
                               "Options.Precision.halfFloatCasting")
        logger.warning("[Deprecated] Do not call options.Precision.halfFloatCasting(): "
                       "HalfUpcastToFloat is the only behaviour")
        return self

    def runningStatisticsAlwaysFloat(self, value: bool) -> "_PrecisionOptions":  # noqa: N802
        """Deprecated in PopTorch, where False is the only behaviour: accepted with PopTorch's
        deprecation message (running statistics have the model's type, as in torch)."""
        _check_bool(value, "Options.Precision.runningStatisticsAlwaysFloat")
        logger.warning("[Deprecated] Do not call options.Precision."
                       "runningStatisticsAlwaysFloat(): False is the only behaviour")
        return self


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise option_error(f"{what} takes a positive integer, not {value!r}", f"Options.{what}")
    return value


def _check_bool(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise option_error(f"{where} takes True or False, not {value!r}", where)


def _not_modelled(what: str, why: str) -> None:
    raise option_error(f"{what} is not modelled by ipupod ({why}); docs/differences.md lists "
                       f"what differs from PopTorch", f"Options.{what.split('(')[0]}",
                       not_modelled=True)


class _JitOptions:
    """``opts.Jit``: PyTorch JIT options (PopTorch keeps ``traceModel`` only to refuse it)."""

    def traceModel(self, trace_model: bool) -> "_JitOptions":  # noqa: N802
        """Deprecated in PopTorch: False is accepted with its deprecation message (ipupod
        captures the model by exporting it with torch.onnx); True raises, as in PopTorch."""
        _check_bool(trace_model, "Options.Jit.traceModel")
        logger.warning("[Deprecated] Do not call options.Jit.traceModel(): False is the "
                       "default and True is no longer supported")
        if trace_model:
            raise option_error("options.Jit.traceModel(True) is no longer supported (PopTorch "
                               "removed it); remove the call", "Options.Jit.traceModel")
        return self


class TensorLocationSettings:
    """Where one class of tensors lives (PopTorch's ``poptorch.TensorLocationSettings``),
    for ``opts.TensorLocations.setOptimizerLocation(...)`` and its siblings. Each setter
    records its value; the ``set*Location`` call decides what ipupod can do with it."""

    def __init__(self) -> None:
        self.on_chip: Optional[bool] = None
        self.replicated_tensor_sharding: Optional[bool] = None
        self.min_elements_for_off_chip: Optional[int] = None
        self.min_elements_for_replicated_tensor_sharding: Optional[int] = None
        self.io_tiles_to_load: Optional[bool] = None
        self.io_tiles_to_store: Optional[bool] = None

    def useOnChipStorage(self, use: Optional[bool] = True) -> "TensorLocationSettings":  # noqa
        """True: in IPU memory; False: in streaming (off-chip) memory; None: unset."""
        if use is not None:
            _check_bool(use, "TensorLocationSettings.useOnChipStorage")
        self.on_chip = use
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> "TensorLocationSettings":  # noqa
        """Shard the tensors over the replicas (optimizer state: IPUConfig
        ``replicated_tensor_sharding``)."""
        _check_bool(use, "TensorLocationSettings.useReplicatedTensorSharding")
        self.replicated_tensor_sharding = use
        return self

    def minElementsForOffChip(self, min_elements: int) -> "TensorLocationSettings":  # noqa
        """Tensors smaller than this stay on chip (not modelled: a warning says so)."""
        self.min_elements_for_off_chip = _non_negative(
            min_elements, "TensorLocationSettings.minElementsForOffChip")
        return self

    def minElementsForReplicatedTensorSharding(  # noqa: N802
            self, min_elements: int) -> "TensorLocationSettings":
        """Only tensors larger than this are sharded (not modelled: a warning says so)."""
        self.min_elements_for_replicated_tensor_sharding = _non_negative(
            min_elements, "TensorLocationSettings.minElementsForReplicatedTensorSharding")
        return self

    def useIOTilesToLoad(self, use: bool = True) -> "TensorLocationSettings":  # noqa: N802
        """Load the tensors through IO tiles (not modelled: a warning says so)."""
        _check_bool(use, "TensorLocationSettings.useIOTilesToLoad")
        self.io_tiles_to_load = use
        return self

    def useIOTilesToStore(self, use: bool = True) -> "TensorLocationSettings":  # noqa: N802
        """Store the tensors through IO tiles (not modelled: a warning says so)."""
        _check_bool(use, "TensorLocationSettings.useIOTilesToStore")
        self.io_tiles_to_store = use
        return self

    def __repr__(self) -> str:
        set_ = {k: v for k, v in vars(self).items() if v is not None}
        return f"TensorLocationSettings({', '.join(f'{k}={v!r}' for k, v in set_.items())})"


def _non_negative(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise option_error(f"{where} takes a non-negative integer, not {value!r}", where)
    return value


class _TensorLocationOptions:
    """``opts.TensorLocations``: where activations, weights, optimizer state and gradient
    accumulators live. ipupod's memory plan has one movable class, the optimizer state
    (IPUConfig ``optimizer_state_offchip``, ``replicated_tensor_sharding``); it keeps
    activations, weights and accumulators in IPU memory, so asking to move those raises
    ``poptorch.Error``. What only changes tile layout (IO tiles, size thresholds) is accepted
    with a :class:`PoptorchWarning`."""

    def __init__(self) -> None:
        self.optimizer_offchip: Optional[bool] = None
        self.optimizer_sharding: Optional[bool] = None
        self.io_tiles: Optional[int] = None

    def numIOTiles(self, num_tiles: int) -> "_TensorLocationOptions":  # noqa: N802
        """Tiles kept for I/O (an even number 32-192): accepted, not modelled (the simulated
        time counts every tile as a compute tile)."""
        where = "Options.TensorLocations.numIOTiles"
        if isinstance(num_tiles, bool) or not isinstance(num_tiles, int) or \
                not 32 <= num_tiles <= 192 or num_tiles % 2:
            raise option_error(f"{where} takes an even number between 32 and 192, not "
                               f"{num_tiles!r}", where)
        warn(f"{where}({num_tiles}) is accepted without effect: ipupod does not model IO "
             f"tiles (the simulated time counts every tile as a compute tile; results do not "
             f"change)")
        self.io_tiles = num_tiles
        return self

    def setActivationLocation(self, location: TensorLocationSettings  # noqa: N802
                              ) -> "_TensorLocationOptions":
        """Activations stay in IPU memory: ``useOnChipStorage(False)`` and replicated tensor
        sharding raise ``poptorch.Error``."""
        self._fixed("activations", "setActivationLocation", location)
        return self

    def setWeightLocation(self, location: TensorLocationSettings  # noqa: N802
                          ) -> "_TensorLocationOptions":
        """Weights stay in IPU memory: ``useOnChipStorage(False)`` and replicated tensor
        sharding raise ``poptorch.Error``."""
        self._fixed("weights", "setWeightLocation", location)
        return self

    def setAccumulatorLocation(self, location: TensorLocationSettings  # noqa: N802
                               ) -> "_TensorLocationOptions":
        """Gradient accumulators stay in IPU memory: ``useOnChipStorage(False)`` and
        replicated tensor sharding raise ``poptorch.Error``."""
        self._fixed("gradient accumulators", "setAccumulatorLocation", location)
        return self

    def setOptimizerLocation(self, location: TensorLocationSettings  # noqa: N802
                             ) -> "_TensorLocationOptions":
        """The optimizer state: ``useOnChipStorage(False)`` keeps it in streaming memory
        (IPUConfig ``optimizer_state_offchip=true``; True: ``false``),
        ``useReplicatedTensorSharding(True)`` shards it over the replicas
        (``replicated_tensor_sharding``). Unset, the IPUConfig's value stands (optimum's
        default: off chip, unsharded)."""
        where = "Options.TensorLocations.setOptimizerLocation"
        self._check(location, where)
        self._layout_only(location, where)
        if location.on_chip is not None:
            self.optimizer_offchip = not location.on_chip
        if location.replicated_tensor_sharding is not None:
            self.optimizer_sharding = location.replicated_tensor_sharding
        return self

    @staticmethod
    def _check(location: Any, where: str) -> None:
        if not isinstance(location, TensorLocationSettings):
            raise option_error(f"{where} takes a poptorch.TensorLocationSettings, not "
                               f"{location!r}", where)

    def _fixed(self, what: str, method: str, location: TensorLocationSettings) -> None:
        where = f"Options.TensorLocations.{method}"
        self._check(location, where)
        if location.on_chip is False:
            raise option_error(
                f"{where}(useOnChipStorage(False)) is not modelled: ipupod keeps {what} in IPU "
                f"memory (streaming memory holds only the optimizer state: "
                f"setOptimizerLocation); remove the call, or use recomputation and "
                f"setAvailableMemoryProportion to save memory", where, not_modelled=True)
        if location.replicated_tensor_sharding:
            raise option_error(
                f"{where}(useReplicatedTensorSharding(True)) is not modelled: ipupod shards "
                f"only the optimizer state over replicas (setOptimizerLocation("
                f"TensorLocationSettings().useReplicatedTensorSharding(True)))", where,
                not_modelled=True)
        self._layout_only(location, where)

    @staticmethod
    def _layout_only(location: TensorLocationSettings, where: str) -> None:
        ignored = [name for name, value in [
            ("minElementsForOffChip", location.min_elements_for_off_chip),
            ("minElementsForReplicatedTensorSharding",
             location.min_elements_for_replicated_tensor_sharding),
            ("useIOTilesToLoad", location.io_tiles_to_load),
            ("useIOTilesToStore", location.io_tiles_to_store)] if value is not None]
        if ignored:
            warn(f"{where}: {', '.join(ignored)} accepted without effect: ipupod places every "
                 f"tensor of the class as useOnChipStorage and useReplicatedTensorSharding "
                 f"say, whatever its size, and does not model IO tiles (the memory plan and "
                 f"simulated time may differ from the IPU's; results do not)")


class _DistributedOptions:
    """``opts.Distributed``: the process of a multi-process (PopRun, mpirun) run. ipupod runs
    every replica of a model in one process's executable, so more than one process raises
    ``poptorch.Error`` when the model compiles (use ``replicationFactor`` in one process)."""

    def __init__(self) -> None:
        self.num_processes = 1
        self.process_id = 0
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> "_DistributedOptions":
        """One process (ignores the environment)."""
        self.num_processes, self.process_id = 1, 0
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str  # noqa: N802
                       ) -> "_DistributedOptions":
        """Reads the process count and id from these variables (default OpenMPI's
        ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK``)."""
        where = "Options.Distributed.setEnvVarNames"
        try:
            process_id = int(os.environ.get(var_process_id, "0"))
            num_processes = int(os.environ.get(var_num_processes, "1"))
        except ValueError:
            raise option_error(f"${var_num_processes} and ${var_process_id} must be integers",
                               where) from None
        return self.configureProcessId(process_id, num_processes)

    def configureProcessId(self, process_id: int, num_processes: int  # noqa: N802
                           ) -> "_DistributedOptions":
        """This process's id and the number of processes."""
        where = "Options.Distributed.configureProcessId"
        _positive(num_processes, "Distributed.configureProcessId")
        if isinstance(process_id, bool) or not isinstance(process_id, int) or \
                not 0 <= process_id < num_processes:
            raise option_error(f"{where}: process id {process_id!r} is not in 0.."
                               f"{num_processes - 1}", where)
        self.num_processes, self.process_id = num_processes, process_id
        return self

    @property
    def processId(self) -> int:  # noqa: N802
        """This process's id."""
        return self.process_id

    @property
    def numProcesses(self) -> int:  # noqa: N802
        """How many processes the run is distributed over."""
        return self.num_processes


class Options:
    """PopTorch's ``poptorch.Options`` for ipupod: how a wrapped model is compiled and run.

    Setters return the options, so they chain: ``Options().deviceIterations(4)
    .replicationFactor(2)``. Every setter of PopTorch's either takes effect, is accepted
    with the reason it does not apply to a simulated pod (its docstring says which), or
    raises ``poptorch.Error`` saying why and what to use instead; so does naming a PopTorch
    method ipupod does not have (``anchorTensor``, ``enableProfiling``, ``_Popart``, ...).
    Refused values raise :class:`OptionError`, a ``poptorch.Error`` that is also a
    ``ValueError``. ``$POPTORCH_CACHE_DIR`` enables executable caching, as in PopTorch.
    """

    def __init__(self) -> None:
        self.Training = _TrainingOptions()
        self.Precision = _PrecisionOptions()
        self.TensorLocations = _TensorLocationOptions()
        self.Distributed = _DistributedOptions()
        self.Jit = _JitOptions()
        self.input_group_size = 1
        self.input_group_type = enums.CommGroupType.Consecutive
        self.broadcast_buffers = True
        self.synthetic_data = False
        self.log_dir = "."
        self.max_repeat_logs: Optional[int] = 4
        self.model_name: Optional[str] = None
        self.log_cycle_count = False
        self.connection_type = enums.ConnectionType.Always
        self.sync_pattern = enums.SyncPattern.Full
        self.ipu_id: Optional[int] = None
        self.ipu_version = 2
        self.offline_target = False
        self.use_ipu_model = False
        self.stable_norm: Optional[bool] = None
        self.show_compilation_progress_bar = True
        self.relax_optimizer_attributes_checks = False
        self.device_iterations = 1
        self.replication_factor = 1
        # the run shape's attributes an IPUConfig set and no setter has changed since
        self._from_config: Set[str] = set()
        self.output_mode: Optional[OutputMode] = None
        self.output_return_period = 1
        self.auto_round_num_ipus = False
        self.execution_strategy: ExecutionStrategy = PipelinedExecution()
        self.ipu_config: Dict[str, Any] = {}
        self.server_address: Optional[str] = None
        self.token: Optional[str] = None
        self.user: Optional[str] = None
        self.executable_cache_dir = ""
        self.available_memory_proportion: Optional[List[float]] = None
        cache = os.environ.get("POPTORCH_CACHE_DIR", "")
        if cache:
            logger.info("POPTORCH_CACHE_DIR is set: caching executables in %s", cache)
            self.enableExecutableCaching(cache)

    # ------------------------------------------------------------------ PopTorch's setters

    def deviceIterations(self, iterations: int) -> "Options":
        """Micro-batches (training: weight updates) per call of the model."""
        self.device_iterations = _positive(iterations, "deviceIterations")
        self._from_config.discard("device_iterations")
        return self

    def replicationFactor(self, replicas: int) -> "Options":
        """Copies of the model, each on its own IPUs, each taking its own micro-batches."""
        self.replication_factor = _positive(replicas, "replicationFactor")
        self._from_config.discard("replication_factor")
        return self

    def inputReplicaGrouping(self, input_group_size: int,  # noqa: N802
                             input_group_type: enums.CommGroupType) -> "Options":
        """Replicas in one group of ``input_group_size`` get the same input data, so a call
        takes micro-batch x deviceIterations x replicationFactor / input_group_size (x
        gradientAccumulation) samples: ``CommGroupType.Consecutive`` groups replicas
        0..k-1, k..2k-1, ...; ``Orthogonal`` groups r, r+m, r+2m, ... (m groups);
        ``NoGrouping`` is size 1. The front end sends each group's data to every replica of
        the group (replicas hold the same weights, as ipupod has no per-replica weights)."""
        where = "Options.inputReplicaGrouping"
        if not isinstance(input_group_type, enums.CommGroupType):
            raise option_error(f"{where} takes a poptorch.CommGroupType, not "
                               f"{input_group_type!r}", where)
        if input_group_type == enums.CommGroupType.NoGrouping:
            input_group_size, input_group_type = 1, enums.CommGroupType.Consecutive
        if input_group_type == enums.CommGroupType.All:
            raise option_error(f"{where}: input_group_type cannot be CommGroupType.All; use "
                               f"Consecutive or Orthogonal", where)
        _positive(input_group_size, "inputReplicaGrouping")
        self._check_input_groups(input_group_size, self.replication_factor)
        self.input_group_size, self.input_group_type = input_group_size, input_group_type
        return self

    @staticmethod
    def _check_input_groups(size: int, replicas: int) -> None:
        if replicas % size:
            raise option_error(f"inputReplicaGrouping: input_group_size {size} must divide "
                               f"replicationFactor {replicas} (set replicationFactor first)",
                               "Options.inputReplicaGrouping")

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> "Options":  # noqa: N802
        """True (the default): ipupod keeps one copy of each buffer, updated by every
        micro-batch of every replica in data order (docs/differences.md, "Buffers"). False:
        each replica keeps its own copy, updated by its own micro-batches (IPUConfig
        ``broadcast_buffers``); ``copyWeightsToHost`` reads replica 0's, and
        ``copyWeightsToDevice`` writes every replica's."""
        _check_bool(broadcast_buffers, "Options.broadcastBuffers")
        self.broadcast_buffers = broadcast_buffers
        return self

    def logDir(self, log_dir: str) -> "Options":  # noqa: N802
        """Accepted: the front end writes no log files (it logs to the ``poptorch`` logger;
        the server keeps its own log)."""
        self.log_dir = os.fspath(log_dir)
        return self

    def maxRepeatLogs(self, max_lines: Optional[int]) -> "Options":  # noqa: N802
        """Accepted: the front end logs nothing repeatedly (one line per compile, attach and
        implicit copy), so there is nothing to suppress."""
        if max_lines is not None:
            _non_negative(max_lines, "Options.maxRepeatLogs")
        self.max_repeat_logs = max_lines
        return self

    def modelName(self, name: str) -> "Options":  # noqa: N802
        """Accepted: names the model in the front end's log lines (PopTorch: the profile's
        subdirectory; ipupod writes no profiles)."""
        self.model_name = str(name)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> "Options":  # noqa: N802
        """Lets ``cycleCount()`` answer, and logs each run's cycles at DEBUG: the simulated
        device time of the last run x the GC200's clock (1330 MHz)."""
        _check_bool(log_cycle_count, "Options.logCycleCount")
        self.log_cycle_count = log_cycle_count
        return self

    def connectionType(self, connection_type: enums.ConnectionType) -> "Options":  # noqa
        """``Always`` (default) and ``OnDemand`` both attach once the executable is compiled
        (on a simulated pod, attaching earlier buys nothing); ``Never`` compiles without
        attaching (``compile()``, ``compileAndExport``) and calling the model raises."""
        if not isinstance(connection_type, enums.ConnectionType):
            raise option_error(f"connectionType takes a poptorch.ConnectionType, not "
                               f"{connection_type!r}", "Options.connectionType")
        self.connection_type = connection_type
        return self

    def syncPattern(self, sync_pattern: enums.SyncPattern) -> "Options":  # noqa: N802
        """Accepted without effect (hardware only): how real IPUs synchronise for host I/O;
        the simulated pod's time model has every IPU of a step synchronise (``Full``)."""
        if not isinstance(sync_pattern, enums.SyncPattern):
            raise option_error(f"syncPattern takes a poptorch.SyncPattern, not "
                               f"{sync_pattern!r}", "Options.syncPattern")
        self.sync_pattern = sync_pattern
        return self

    def useIpuId(self, ipu_id: int) -> "Options":  # noqa: N802
        """Run on the device of this gc-info id (docs/scheduling.md numbers ipupod's blocks
        as gc-info does). ipupod attaches where its scheduler decides, except inside a
        partition: the id must be the ``device_id`` of one of your partitions
        (``ipupod partition create NAME --size N``; ``ipupod partition list`` shows ids),
        of the size the model needs, else the attach raises ``poptorch.Error``."""
        if isinstance(ipu_id, bool) or not isinstance(ipu_id, int) or ipu_id < 0:
            raise option_error(f"useIpuId takes a device id (a non-negative integer), not "
                               f"{ipu_id!r}", "Options.useIpuId")
        self.ipu_id = ipu_id
        return self

    def enableStableNorm(self, enabled: bool) -> "Options":  # noqa: N802
        """Accepted: ipupod computes every norm the stable way (the mean first, then the mean
        of squared deviations, in float64), whatever this says."""
        _check_bool(enabled, "Options.enableStableNorm")
        self.stable_norm = enabled
        return self

    def showCompilationProgressBar(self, show: bool = True) -> "Options":  # noqa: N802
        """Accepted: the server compiles, so there is no progress to show; the compile is
        logged at INFO instead."""
        self.show_compilation_progress_bar = bool(show)
        return self

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> "Options":  # noqa: N802
        """Accepted: ``setOptimizer`` refuses a changed constant whatever this says."""
        self.relax_optimizer_attributes_checks = bool(relax)
        return self

    def sourceLocationExcludes(self, excludes: List[str]) -> "Options":  # noqa: N802
        """Accepted: ipupod prints no IR with source locations."""
        return self

    def appendToLocationExcludes(self, *excludes: str) -> "Options":  # noqa: N802
        """Accepted: ipupod prints no IR with source locations."""
        return self

    def disableModuleNamescope(self) -> "Options":  # noqa: N802
        """Accepted: node names only (the export names nodes as torch.onnx does)."""
        return self

    def defaultOutputMode(self) -> bool:  # noqa: N802
        """True while ``outputMode`` was not set (or was set to ``OutputMode.Default``)."""
        return self.output_mode in (None, OutputMode.Default)

    def from_json(self, string: str) -> "Options":
        """Applies ``{"Precision.enableStochasticRounding": false, "deviceIterations": 4}``:
        each key a setter's path, each value its argument (a list: its arguments; an enum as
        ``"ReductionType.Mean"``)."""
        for path, value in json.loads(string).items():
            target: Any = self
            for part in path.split("."):
                target = getattr(target, part)
            if isinstance(value, str) and "." in value:
                kind, _, member = value.partition(".")
                value = getattr(getattr(enums, kind, None), member, value)
            if isinstance(value, list):
                target(*value)
            else:
                target(value)
        return self

    def outputMode(self, mode: OutputMode, output_return_period: Optional[int] = None
                   ) -> "Options":
        """Which results a call returns: ``OutputMode.All``, ``Final``, ``Sum``,
        ``EveryN`` (with ``output_return_period``) or ``Default``."""
        if not isinstance(mode, OutputMode):
            raise ValueError(f"outputMode takes a poptorch.OutputMode, not {mode!r}")
        if (mode == OutputMode.EveryN) != (output_return_period is not None):
            raise ValueError("OutputMode.EveryN needs output_return_period (and only it does)")
        self.output_mode = mode
        self.output_return_period = output_return_period or 1
        return self

    def autoRoundNumIPUs(self, enabled: bool = True) -> "Options":
        """Reserve a power of two of IPUs when the model uses another count."""
        self.auto_round_num_ipus = bool(enabled)
        return self

    def setExecutionStrategy(self, strategy: ExecutionStrategy) -> "Options":
        """``PipelinedExecution`` (the default), ``ShardedExecution``,
        ``SerialPhasedExecution`` or ``ParallelPhasedExecution``, with their stages."""
        if not isinstance(strategy, ExecutionStrategy):
            raise ValueError(f"setExecutionStrategy takes PipelinedExecution, "
                             f"ShardedExecution, SerialPhasedExecution or "
                             f"ParallelPhasedExecution, not {strategy!r}")
        self.execution_strategy = strategy
        return self

    def setAvailableMemoryProportion(self, available_memory_proportion: Mapping[str, float]
                                     ) -> "Options":
        """The share (0 to 1) of each IPU's memory its matrix products, convolutions and
        embedding lookups may use for temporaries, as ``{"IPU0": 0.3, "IPU1": 0.2}``: the
        IPUConfig's ``matmul_proportion`` (one value, or one per IPU, IPU0 up, every IPU of
        a replica named). ``set_available_memory`` overrides it for one op."""
        values: Dict[int, float] = {}
        for key, value in dict(available_memory_proportion).items():
            if not (isinstance(key, str) and key.startswith("IPU") and key[3:].isdigit()):
                raise ValueError(f"setAvailableMemoryProportion keys are 'IPU0', 'IPU1', ...; "
                                 f"not {key!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not 0.0 <= value <= 1.0:
                raise ValueError(f"setAvailableMemoryProportion: {key}'s proportion must be "
                                 f"between 0 and 1, not {value!r}")
            values[int(key[3:])] = float(value)
        if sorted(values) != list(range(len(values))) or not values:
            raise ValueError(f"setAvailableMemoryProportion names IPUs "
                             f"{sorted(values)}; name every IPU of a replica from IPU0 up")
        self.available_memory_proportion = [values[i] for i in range(len(values))]
        return self

    def enableExecutableCaching(self, path: Optional[str]) -> "Options":  # noqa: N802
        """Keeps each compiled executable in the directory ``path`` on this machine (created
        if needed), keyed by the SHA-256 of the exported model, the compile settings and the
        ipupod version: a later wrapper of the same model with the same options, in this
        process or another, loads it from there without asking the server to compile.
        ``None`` turns caching off. ``$POPTORCH_CACHE_DIR`` sets it too."""
        self.executable_cache_dir = "" if path is None else os.fspath(path)
        return self

    def useIpuModel(self, use_model: bool) -> "Options":  # noqa: N802
        """Accepted without effect: every ipupod IPU is already a model of a GC200 (so is
        ``$POPTORCH_IPU_MODEL``)."""
        self.use_ipu_model = bool(use_model)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> "Options":  # noqa: N802
        """Compile without a device: ``compile()`` compiles on the server and does not attach
        (compiling needs no IPU). Unlike PopTorch's offline target, calling the model still
        attaches and runs. ``ipu_version`` must be 2 (Mk2, the GC200 ipupod simulates)."""
        if ipu_version != 2:
            _not_modelled(f"useOfflineIpuTarget({ipu_version!r})",
                          "ipupod simulates the GC200, an IPU of version 2 (Mk2); pass 2")
        self.ipu_version, self.offline_target = 2, True
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":  # noqa: N802
        """True disables host I/O, as PopTorch's synthetic data does for benchmarking
        (IPUConfig ``synthetic_data``): each run still checks the call's inputs' shapes,
        then runs on random normal data made on the device (integer inputs zero) and
        returns zeros; the simulated time has no host transfers of inputs and outputs."""
        _check_bool(enabled, "Options.enableSyntheticData")
        self.synthetic_data = enabled
        return self

    def randomSeed(self, seed: int) -> "Options":
        """The IPUConfig's ``seed``: training-mode Dropout draws the same masks for the same
        seed, bit for bit (docs/differences.md, "Random ops")."""
        self.ipu_config["seed"] = int(seed)
        return self

    def loadFromFile(self, path: str) -> "Options":
        """Applies a file of setter calls, one per line, as PopTorch does
        (``deviceIterations(4)``, ``Training.gradientAccumulation(2)``)."""
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    self._apply_line(line.strip(), f"{path}:{number}")
        return self

    # ------------------------------------------------------------------ ipupod's own

    def ipuConfig(self, config: Union[str, "os.PathLike[str]", Mapping[str, Any]]) -> "Options":
        """An optimum-graphcore IPUConfig (a dict, JSON text or an ipu_config.json path).
        Its run shape becomes the options' as optimum's ``to_options()`` makes it:
        ``device_iterations``, ``replication_factor`` and ``gradient_accumulation_steps``
        (an inference model takes ``inference_device_iterations`` and
        ``inference_replication_factor`` where given); setters called afterwards override
        them, and every other key."""
        if isinstance(config, Mapping):
            self.ipu_config = dict(config)
        elif os.fspath(config).lstrip().startswith("{"):
            self.ipu_config = json.loads(os.fspath(config))
        else:
            with open(config, encoding="utf-8") as file:
                self.ipu_config = json.load(file)
        for attribute in ("device_iterations", "replication_factor"):
            if attribute in self.ipu_config:
                setattr(self, attribute, _positive(int(self.ipu_config[attribute]), attribute))
                self._from_config.add(attribute)
        if "gradient_accumulation_steps" in self.ipu_config:
            self.Training.gradientAccumulation(int(self.ipu_config["gradient_accumulation_steps"]))
        return self

    def for_mode(self, training: bool) -> "Options":
        """A copy for a training or an inference model: an inference model takes the
        IPUConfig's ``inference_`` run shape where no setter overrode it."""
        options = self.clone()
        if not training:
            for attribute in options._from_config:
                key = f"inference_{attribute}"
                if key in options.ipu_config:
                    setattr(options, attribute, _positive(int(options.ipu_config[key]), key))
        return options

    def server(self, address: Optional[str] = None, token: Optional[str] = None,
               user: Optional[str] = None) -> "Options":
        """The ipupodd to use (default ``$IPUPOD_SERVER``), its token (``$IPUPOD_TOKEN``)
        and, on an open-mode server, your name (``$IPUPOD_USER``, ``$USER``)."""
        self.server_address, self.token, self.user = address, token, user
        return self

    def clone(self) -> "Options":
        """A deep copy."""
        return copy.deepcopy(self)

    def compile_settings(self, training: bool) -> "CompileSettings":
        """The IPUConfig and ``--set`` overrides for a training or an inference compile."""
        prefix = "" if training else "inference_"
        sets = [f"{prefix}device_iterations={self.device_iterations}",
                f"{prefix}replication_factor={self.replication_factor}"]
        if training:
            sets.append(f"gradient_accumulation_steps={self.Training.gradient_accumulation}")
            if self.Training.auto_loss_scaling:
                sets.append("auto_loss_scaling=true")
        if self.output_mode is not None:
            sets.append(f"{'output_mode' if training else 'inference_output_mode'}="
                        f"{self._output_mode_text()}")
        if self.auto_round_num_ipus:
            sets.append("auto_round_num_ipus=true")
        if self.synthetic_data:
            sets.append("synthetic_data=true")
        if not self.broadcast_buffers and self.replication_factor > 1:
            sets.append("broadcast_buffers=false")
        half = self.Precision.half_partials
        if half is not None or "enable_half_partials" not in self.ipu_config:
            sets.append(f"enable_half_partials={'true' if half else 'false'}")
        sets += self.execution_strategy.compile_sets(training)
        sets += self._memory_proportion_sets(prefix)
        if training:
            sets += self._optimizer_location_sets()
        if self.Distributed.num_processes > 1:
            _not_modelled(f"Distributed execution over {self.Distributed.num_processes} "
                          f"processes", "ipupod runs every replica of a model in one "
                          "process's executable; run one process with replicationFactor(N) "
                          "(or Distributed.disable())")
        self._check_input_groups(self.input_group_size, self.replication_factor)
        return CompileSettings(ipu_config=dict(self.ipu_config), sets=sets)

    def _optimizer_location_sets(self) -> List[str]:
        """TensorLocations.setOptimizerLocation: where the optimizer state lives."""
        locations, sets = self.TensorLocations, []
        if locations.optimizer_offchip is not None:
            sets.append(f"optimizer_state_offchip="
                        f"{'true' if locations.optimizer_offchip else 'false'}")
        if locations.optimizer_sharding is not None:
            sets.append(f"replicated_tensor_sharding="
                        f"{'true' if locations.optimizer_sharding else 'false'}")
        return sets

    def _memory_proportion_sets(self, prefix: str) -> List[str]:
        """One proportion for every IPU, or a list and the IPU count it covers."""
        proportions = self.available_memory_proportion
        if proportions is None:
            return []
        if len(set(proportions)) == 1:
            return [f"{prefix}matmul_proportion={proportions[0]}"]
        listed = " ".join(str(p) for p in proportions)
        return [f"{prefix}ipus_per_replica={len(proportions)}",
                f"{prefix}matmul_proportion=[{listed}]"]

    def _output_mode_text(self) -> str:
        if self.output_mode == OutputMode.EveryN:
            return f"every_n:{self.output_return_period}"
        return self.output_mode.value

    def _apply_line(self, line: str, where: str) -> None:
        try:
            call = ast.parse(line, mode="eval").body
            if not isinstance(call, ast.Call):
                raise ValueError("not a setter call")
            eval(compile(ast.Expression(body=call), where, "eval"),  # noqa: S307 - the user's file
                 {"__builtins__": {}, "poptorch": _config_names(), "True": True,
                  "False": False, "None": None},
                 {"__options": self, **_setters(self)})
        except (SyntaxError, ValueError, AttributeError, TypeError, Error) as error:
            raise ConfigFileError(f"{where}: cannot apply '{line}': {error}; each line must be "
                                  f"one Options setter call, e.g. deviceIterations(4)",
                                  code=grpc.StatusCode.INVALID_ARGUMENT, type="client.options",
                                  location="Options.loadFromFile") from None

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """Unpickling (``poptorch.load`` of a file written by an older ipupod): the options it
        did not have yet get their defaults."""
        self.__init__()  # type: ignore[misc]
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_MODELLED:
            raise not_modelled(name, _NOT_MODELLED[name], owner="Options")
        raise AttributeError(f"'Options' object has no attribute '{name}'")

    def __repr__(self) -> str:
        return (f"poptorch.Options(deviceIterations={self.device_iterations}, "
                f"replicationFactor={self.replication_factor}, gradientAccumulation="
                f"{self.Training.gradient_accumulation}, outputMode={self.output_mode}, "
                f"strategy={type(self.execution_strategy).__name__})")


#: PopTorch's Options methods ipupod does not provide: why, and what to use instead.
_NOT_MODELLED = {
    "anchorTensor": "ipupod returns only the model's outputs; return the tensor from forward "
                    "as one more output instead",
    "enableProfiling": "ipupod writes no Poplar profile; the compile report (ipupod compile "
                       "--report, or ipupod.Client().compile(..., report=True)) has the memory "
                       "plan and the simulated time",
    "updatableNamedBuffers": "copyWeightsToDevice() writes every weight and buffer; use it",
    "_Popart": "PopART session options do not exist in ipupod; set what the compiler models "
               "through Options.ipuConfig({...}) (optimum-graphcore's IPUConfig keys)",
}


class ConfigFileError(OptionError):
    """A line of an ``Options.loadFromFile`` file that could not be applied (PopTorch's
    ``poptorch.ConfigFileError``; a ``poptorch.Error`` and a ``ValueError`` here)."""


def _config_names() -> types.SimpleNamespace:
    """What ``poptorch.NAME`` is in a config file (``poptorch.ShardedExecution()``): PopTorch's
    enums, the execution strategies and the option classes, i.e. the public classes defined
    in enums, blocks and this module - every type a setter takes. (The package imports this
    module, so the namespace is not the package itself.)"""
    names: Dict[str, Any] = {}
    for module in (enums, blocks, sys.modules[__name__]):
        names.update({name: value for name, value in vars(module).items()
                      if not name.startswith("_") and isinstance(value, type)
                      and value.__module__ == module.__name__})
    return types.SimpleNamespace(**names)


def _setters(options: Options) -> Dict[str, Any]:
    names = [n for n in dir(options) if not n.startswith("_") and n[0].islower()]
    return {**{n: getattr(options, n) for n in names}, "Training": options.Training,
            "Precision": options.Precision, "TensorLocations": options.TensorLocations,
            "Distributed": options.Distributed, "Jit": options.Jit}


class CompileSettings:
    """What :meth:`Options.compile_settings` gives ``Client.compile``."""

    def __init__(self, ipu_config: Dict[str, Any], sets: List[str]) -> None:
        self.ipu_config = ipu_config
        self.sets = sets
