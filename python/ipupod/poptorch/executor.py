"""``PoplarExecutor``: a PyTorch model wrapped to run on ipupod's IPUs, as PopTorch's
``inferenceModel`` and ``trainingModel`` return it.

The first call exports the model (ONNX, :mod:`ipupod.poptorch.export`), compiles it on the
server (``Client.compile``), attaches to as many IPUs as it needs (queueing when
``POPTORCH_WAIT_FOR_IPU=1``), loads it and writes the module's weights; later calls only run.
Parameters stay shared with the user's module (:class:`_WeightSync`): a training call leaves
the newest weights on the device, and they come back to the module with
``copyWeightsToHost()``, or implicitly before another executor of the same module runs, the
module runs on the CPU, or its ``state_dict()`` is read.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import grpc
import torch

from ipupod import errors
from ipupod.client import Client
from ipupod.compiling import CompileResult
from ipupod.poptorch import _cache, enums, export, optim
from ipupod.poptorch._support import logger, not_modelled, warn
from ipupod.poptorch.enums import OutputMode
from ipupod.poptorch.options import Options

_FORMAT = "ipupod.poptorch/1"
#: The GC200's clock (device/hardware.h), for cycle counts when the server does not say.
GC200_CLOCK_HZ = 1.33e9
#: registerPreCompileHook / registerPostCompileHook: called with no arguments around every
#: compile (export and server compile, or a cache hit).
_PRECOMPILE_HOOKS: "collections.OrderedDict[int, Callable[[], None]]" = collections.OrderedDict()
_POSTCOMPILE_HOOKS: "collections.OrderedDict[int, Callable[[], None]]" = collections.OrderedDict()
#: PopTorch's PoplarExecutor methods ipupod does not provide: why, and what to use instead.
_NOT_MODELLED = {
    "getTensorNames": "the executable's tensor names are ONNX names; read them from the "
                      "exported model (torch.onnx.export) or the compile report",
    "getAnchoredTensor": "Options.anchorTensor is not modelled; return the tensor from forward",
    "copyNamedBuffersToDevice": "copyWeightsToDevice() writes every weight and buffer",
    "rng_state": "ipupod's random ops are keyed by Options.randomSeed and the step "
                 "(docs/differences.md, \"Random ops\"); set randomSeed to repeat a run",
    "save": "use compileAndExport(filename, *inputs) (it compiles first if needed)",
    "_debugGetPopartIR": "ipupod compiles ONNX, not PopART IR; export the model with "
                         "torch.onnx to see the graph",
}


class _WeightSync:
    """Which of a module's executors holds weights newer than the module's (``dirty``) and
    how often the module's weights were refreshed from a device (``host_version``)."""

    _of: "weakref.WeakKeyDictionary[torch.nn.Module, _WeightSync]" = weakref.WeakKeyDictionary()

    def __init__(self, model: torch.nn.Module) -> None:
        self.dirty: Optional["PoplarExecutor"] = None
        self.host_version = 0
        self.busy = False
        self.handles = [model.register_forward_pre_hook(self.pull),
                        model._register_state_dict_hook(self.pull)]

    @classmethod
    def of(cls, model: torch.nn.Module) -> "_WeightSync":
        if model not in cls._of:
            cls._of[model] = cls(model)
        return cls._of[model]

    def pull(self, *unused: Any) -> None:
        """Brings the newest weights to the module (a hook: before forward, after
        state_dict, which shares the parameters' storage)."""
        if self.dirty is not None and not self.busy:
            logger.debug("implicit copyWeightsToHost() of %s", self.dirty._name())
            self.dirty.copyWeightsToHost()

    def detached_hooks(self) -> "_HooksOff":
        return _HooksOff(self)


class _HooksOff:
    """Removes the sync hooks while a module is pickled (they hold the executors)."""

    def __init__(self, sync: _WeightSync) -> None:
        self._sync = sync

    def __enter__(self) -> None:
        for handle in self._sync.handles:
            handle.remove()

    def __exit__(self, *exc_info: Any) -> None:
        model = next(m for m, s in _WeightSync._of.items() if s is self._sync)
        self._sync.handles = [model.register_forward_pre_hook(self._sync.pull),
                              model._register_state_dict_hook(self._sync.pull)]


def _check_precision(model: torch.nn.Module, inputs: tuple) -> None:
    """Every float parameter, buffer and input is float32 or float16 (PopTorch 4.7: each
    keeps its own type, and mixtures are converted as export.py says); float64 and bfloat16
    are refused."""
    named = list(model.state_dict().items()) + [(f"input {i}", t) for i, t in enumerate(inputs)]
    for name, tensor in named:
        if tensor.is_floating_point() and tensor.dtype not in (torch.float, torch.half):
            raise ValueError(f"{name} is {tensor.dtype}; ipupod computes in float32 or float16: "
                             f"use model.float() or model.half() (or .float() / .half() on "
                             f"the tensor) and inputs of those types")


def _add_hint(error: errors.Error, hint: str) -> None:
    """Tells a PopTorch user what to do in the front end's terms."""
    error.message = f"{error.message}; {hint}"
    error.args = (error.message,)


def _export_error(error: Exception) -> errors.Error:
    return errors.Error(
        f"torch.onnx cannot export the model: {error}. Rewrite the operation in ops torch.onnx "
        f"exports (opset {export.OPSET}), or register a symbolic for it "
        f"(torch.onnx.register_custom_op_symbolic)", code=grpc.StatusCode.INVALID_ARGUMENT,
        type="client.export", location="poptorch export")


class PoplarExecutor:
    """A wrapped model (do not make one directly: use ``inferenceModel`` or
    ``trainingModel``). Calling it runs the model on ipupod; attributes it does not have are
    the wrapped module's."""

    def __init__(self, model: torch.nn.Module, options: Optional[Options], training: bool,
                 optimizer: Any = None) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"expected a torch.nn.Module, not {type(model).__name__}")
        self._model = model
        self._options = (options or Options()).for_mode(training)
        self._training = training
        if training and optimizer is None:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # PopTorch's default
        self._optimizer = optimizer
        self._opt_spec = optim.describe(optimizer, model) if training else None
        self._bind_optimizer(optimizer)
        self._pending_opt: Dict[str, float] = {}
        self._sync = _WeightSync.of(model)
        self._client: Optional[Client] = None
        self._session: Any = None
        self._exported: Optional[export.Exported] = None
        self._executable: Any = None  # a CompileResult, or .ipx bytes from a file
        self._ipus = 0
        self._samples = 0  # the first input's dim 0 in a call (1 x the factor without inputs)
        self._input_samples: List[int] = []  # every input's
        self._weights: List[str] = []  # the module's tensors the device holds as weights
        # Module tensors the executable holds as constants (frozen parameters of a training
        # model, integer buffers), with their values when exported: a copy to the device
        # cannot change them, so one that changed on the host is an error, never ignored.
        self._constants: Dict[str, torch.Tensor] = {}
        self._device_version = -1
        self._checkpoint: Optional[Dict[str, Any]] = None
        self._destroyed = False
        self._cached_ipx: Optional[str] = None  # the executable in the client-side cache
        self._compile_time: Optional[datetime.timedelta] = None
        self._perf: Dict[str, List[List[float]]] = _no_perf_counters()
        self._perf_starts: List[float] = []  # each iteration's start, device clock
        self._device_clock = 0.0  # simulated seconds this executor's runs took, summed
        self._last_run_seconds: Optional[float] = None
        self._clock_hz: Optional[float] = None

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_MODELLED:
            raise not_modelled(name, _NOT_MODELLED[name], owner="PoplarExecutor")
        return getattr(object.__getattribute__(self, "_model"), name)

    def __repr__(self) -> str:
        kind = "training" if self._training else "inference"
        return f"<poptorch.PoplarExecutor {kind} {type(self._model).__name__}>"

    @property
    def options(self) -> Options:
        """The options this model was wrapped with (a copy of the caller's)."""
        return self._options

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped torch module (shared with the caller, as in PopTorch)."""
        return self._model

    def isCompiled(self) -> bool:  # noqa: N802 - PopTorch's name
        """True once the model is compiled (or an executable was loaded), until ``destroy``."""
        return self._executable is not None and not self._destroyed

    # ------------------------------------------------------------------ running

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs one call: its batch is micro-batch x deviceIterations x replicationFactor
        (x gradientAccumulation when training). Compiles and attaches first if needed."""
        self._check_alive()
        if self._options.connection_type == enums.ConnectionType.Never:
            raise errors.Error("Trying to run a model on an offline device "
                               "(ConnectionType.Never): use model.compile(inputs) instead of "
                               "model(inputs), or another connectionType",
                               code=grpc.StatusCode.FAILED_PRECONDITION,
                               location="PoplarExecutor.__call__")
        if self._exported is None:
            self._compile(args, kwargs)
        if not self.isAttachedToDevice():
            self.attachToDevice()
        self._sync_before_run()
        return self._run(export.positional(self._model, args, kwargs))

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compiles for these inputs and loads onto the IPUs, without running (compile only
        with ``connectionType(Never)`` or ``useOfflineIpuTarget``)."""
        self._check_alive()
        if self._exported is None:
            self._compile(args, kwargs)
        offline = self._options.connection_type == enums.ConnectionType.Never or \
            self._options.offline_target
        if not offline and not self.isAttachedToDevice():
            self.attachToDevice()

    def _run(self, inputs: tuple) -> Any:
        names = self._exported.inputs
        samples = self._input_samples or [self._samples]
        for name, tensor, want in zip(names, inputs, samples):
            if tensor.dim() and tensor.shape[0] != want:
                raise ValueError(f"the model was compiled for calls of {want} samples in "
                                 f"input '{name}' ({self._rule()}), not {tensor.shape[0]}; "
                                 f"keep the batch of the first call")
        inputs = self._spread_input_groups(inputs)
        arrays = {n: t.detach().cpu().contiguous().numpy() for n, t in zip(names, inputs)}
        result = self._session.run(arrays)
        self._record_run(result, arrays)
        for line in result.log:  # poptorch.ipu_print_tensor, as PopTorch prints on the host
            print(line, flush=True)
        if self._training:
            self._sync.dirty = self
        outputs = (self._output(name, result.outputs[name]) for name in self._exported.outputs)
        return export.rebuild(self._exported.structure, outputs)

    def _output(self, name: str, array: Any) -> torch.Tensor:
        tensor = torch.from_numpy(array.copy())
        if name in self._exported.scalar_outputs and tensor.numel() == 1:
            return tensor.reshape(())
        return tensor

    def _spread_input_groups(self, inputs: tuple) -> tuple:
        """inputReplicaGrouping: the call holds one micro-batch per input group; every
        replica of a group gets its group's (the host batch is [iteration, replica,
        micro-batch] with replicas fastest, device/runtime/step_layout.h)."""
        o = self._options
        size, replicas = o.input_group_size, o.replication_factor
        if size == 1 or not inputs:
            return inputs
        groups = replicas // size
        if o.input_group_type == enums.CommGroupType.Orthogonal:
            group_of = [r % groups for r in range(replicas)]
        else:
            group_of = [r // size for r in range(replicas)]
        index = torch.tensor(group_of)
        spread = []
        steps = self._combined() // groups
        for tensor in inputs:  # each input's own micro-batch (its dim 0 / the factor)
            micro = tensor.shape[0] // self._combined()
            grouped = tensor.reshape(steps, groups, micro, *tensor.shape[1:])
            spread.append(grouped.index_select(1, index).reshape(-1, *tensor.shape[1:]))
        return tuple(spread)

    # ------------------------------------------------------------------ performance

    def _iterations(self) -> int:
        """Micro-batches one replica runs per call (the input copies of PopTorch's counters)."""
        o = self._options
        return o.device_iterations * (o.Training.gradient_accumulation if self._training else 1)

    def _output_ticks(self, iterations: int) -> int:
        """How often one replica sends its outputs during a call (its output mode)."""
        mode = self._options.output_mode or OutputMode.Default
        if mode == OutputMode.Default:
            mode = OutputMode.Final if self._training else OutputMode.All
        if mode == OutputMode.All:
            return iterations
        if mode == OutputMode.EveryN:
            ticks = self._options.device_iterations // self._options.output_return_period
            return ticks if ticks >= 1 and iterations % ticks == 0 else 1
        return 1

    def _record_run(self, result: Any, arrays: Dict[str, Any]) -> None:
        """The call's timeline on the simulated device clock, for getPerfCounters: each
        iteration copies the inputs in (the step's host time shared by bytes between inputs
        and outputs), computes (compute, pipeline ramp and IPU-Link time, shared evenly),
        and every output tick copies the outputs out. The clock runs on from run to run."""
        stats = result.stats
        total = max(float(stats.simulated_seconds), 0.0)
        in_bytes = [int(a.nbytes) for a in arrays.values()]
        out_bytes = [int(result.outputs[n].nbytes) for n in self._exported.outputs
                     if n in result.outputs]
        host = min(max(float(stats.simulated_host_seconds), 0.0), total)
        moved = sum(in_bytes) + sum(out_bytes)
        host_in = host * (sum(in_bytes) / moved if moved else 0.5)
        iterations = self._iterations()
        ticks = self._output_ticks(iterations)
        per_in, per_compute = host_in / iterations, (total - host) / iterations
        per_out = (host - host_in) / ticks
        perf: Dict[str, List[List[float]]] = {k: [[] for _ in b] for k, b in [
            ("input", in_bytes), ("input_complete", in_bytes), ("output", out_bytes),
            ("output_complete", out_bytes)]}
        starts: List[float] = []
        t = self._device_clock
        for i in range(iterations):
            starts.append(t)
            _transfer(perf["input"], perf["input_complete"], in_bytes, t, per_in)
            t += per_in + per_compute
            if (i + 1) % (iterations // ticks) == 0:
                _transfer(perf["output"], perf["output_complete"], out_bytes, t, per_out)
                t += per_out
        self._perf = {k: v or [[]] for k, v in perf.items()}
        self._perf_starts = starts
        self._device_clock = t  # start + total, as the transfers summed it
        self._last_run_seconds = total
        if self._options.log_cycle_count:
            logger.debug("%s: %d cycles (simulated, %.6f s)", self._name(),
                         self._cycles(total), total)

    def getPerfCounters(self) -> Dict[str, List[List[float]]]:  # noqa: N802
        """The last call's performance counters, in seconds of the simulated device's clock
        (the reference point is undefined; differences are valid), as PopTorch returns them:
        ``{"input", "input_complete", "output", "output_complete"}``, each a list per input
        (output) tensor of one timestamp per iteration (per output transfer), for the first
        replica. Before any call: ``[[]]`` each."""
        return {k: [list(v) for v in values] for k, values in self._perf.items()}

    def _compute_latency(self, from_event: str, from_reduce: Callable[[List[float]], float],
                         to_event: str, to_reduce: Callable[[List[float]], float]
                         ) -> Tuple[float, float, float]:
        """(min, max, mean) over the last call's output transfers of the time from the
        earliest ``from_event`` of its iterations to its ``to_event`` (PopTorch's rule)."""
        counters = self.getPerfCounters()

        def per_step(event: str, reduce: Callable[[List[float]], float]) -> List[float]:
            lists = [values for values in counters[event] if values]
            if not lists:  # a model without inputs: the iterations' starts
                return list(self._perf_starts) if event.startswith("input") else []
            return [reduce([values[step] for values in lists]) for step in range(len(lists[0]))]

        starts, ends = per_step(from_event, from_reduce), per_step(to_event, to_reduce)
        if not ends or not starts or len(starts) % len(ends):
            return (0.0, 0.0, 0.0)
        factor = len(starts) // len(ends)
        durations = [end - min(starts[i * factor:(i + 1) * factor])
                     for i, end in enumerate(ends)]
        return (min(durations), max(durations), sum(durations) / len(durations))

    def getComputeLatency(self) -> Tuple[float, float, float]:  # noqa: N802
        """(min, max, mean) seconds, over the last call's output transfers, from the last
        input transferred to the outputs being ready (simulated device time)."""
        return self._compute_latency("input_complete", max, "output", max)

    def getHostIpuLatency(self) -> Tuple[float, float, float]:  # noqa: N802
        """(min, max, mean) seconds from the first input requested to the last transferred."""
        return self._compute_latency("input", min, "input_complete", max)

    def getIpuHostLatency(self) -> Tuple[float, float, float]:  # noqa: N802
        """(min, max, mean) seconds from the first output ready to the last transferred."""
        return self._compute_latency("output", min, "output_complete", max)

    def getLatency(self) -> Tuple[float, float, float]:  # noqa: N802
        """(min, max, mean) round-trip seconds: first input requested to last output sent."""
        return self._compute_latency("input", min, "output_complete", max)

    def cycleCount(self) -> int:  # noqa: N802 - PopTorch's name
        """IPU cycles of the last call: its simulated device time x the IPU clock the server
        reports (the GC200's 1330 MHz). Needs ``Options.logCycleCount(True)``, as PopTorch
        does, and a call first; otherwise ``poptorch.Error``."""
        if not self._options.log_cycle_count:
            raise errors.Error("Cycle count logging is disabled. Please set option "
                               "logCycleCount to True to enable.",
                               code=grpc.StatusCode.FAILED_PRECONDITION,
                               location="PoplarExecutor.cycleCount")
        if self._last_run_seconds is None:
            raise errors.Error("Please run the model at least once before obtaining cycle "
                               "count.", code=grpc.StatusCode.FAILED_PRECONDITION,
                               location="PoplarExecutor.cycleCount")
        return self._cycles(self._last_run_seconds)

    def _cycles(self, seconds: float) -> int:
        if self._clock_hz is None:
            try:
                mhz = self._connect().pod_info().pod.ipu.clock_mhz
            except errors.Error:
                mhz = 0
            self._clock_hz = mhz * 1e6 if mhz else GC200_CLOCK_HZ
        return int(round(seconds * self._clock_hz))

    def compilationTime(self) -> datetime.timedelta:  # noqa: N802 - PopTorch's name
        """How long the compile took (export and server compile, or the cache lookup)."""
        if self._compile_time is None:
            raise errors.Error("Please compile the model before obtaining compilation time.",
                               code=grpc.StatusCode.FAILED_PRECONDITION,
                               location="PoplarExecutor.compilationTime")
        return self._compile_time

    # ------------------------------------------------------------------ compiling

    def _combined(self) -> int:
        """Micro-batches in one call's inputs (replicas of one input group share theirs)."""
        o = self._options
        combined = o.device_iterations * (o.replication_factor // o.input_group_size)
        return combined * o.Training.gradient_accumulation if self._training else combined

    def _rule(self) -> str:
        o = self._options
        text = f"micro-batch x deviceIterations {o.device_iterations} x replicationFactor " \
               f"{o.replication_factor}"
        if o.input_group_size > 1:
            text += f" / input_group_size {o.input_group_size}"
        if self._training:
            text += f" x gradientAccumulation {o.Training.gradient_accumulation}"
        return text

    def _compile(self, args: tuple, kwargs: Dict[str, Any], output: Optional[str] = None
                 ) -> None:
        started = time.monotonic()
        for hook in list(_PRECOMPILE_HOOKS.values()):
            hook()
        inputs = export.positional(self._model, args, kwargs)
        _check_precision(self._model, inputs)
        names = export.input_names(self._model, len(args),
                                   {k: v for k, v in kwargs.items() if v is not None})
        micros = export.micro_batches(inputs, names, self._combined(), self._rule())
        try:
            exported = export.export(self._model, tuple(t[:m] for t, m in zip(inputs, micros)),
                                     names, self._training, self._options.execution_strategy)
        except (RuntimeError, torch.onnx.errors.OnnxExporterError) as error:
            raise _export_error(error) from None
        self._executable = self._compile_exported(exported, output)
        self._exported = exported
        self._constants = self._maybe_constants(exported)
        self._samples = (micros[0] if micros else 1) * self._combined()
        self._input_samples = [m * self._combined() for m in micros]
        self._ipus = int(self._executable.summary.get("ipus", {}).get("reserved", 1))
        self._compile_time = datetime.timedelta(seconds=time.monotonic() - started)
        for hook in list(_POSTCOMPILE_HOOKS.values()):
            hook()

    def _compile_exported(self, exported: export.Exported, output: Optional[str]
                          ) -> CompileResult:
        settings = self._options.compile_settings(self._training)
        extra: Dict[str, Any] = {}
        if self._training:
            frozen = export.frozen(self._model, exported, self._optimizer)
            trained = set(exported.weights) - set(frozen)
            extra = dict(train=True, loss=export.loss_name(exported),
                         optimizer=self._opt_spec.name, optimizer_attrs=self._opt_spec.attrs,
                         frozen=frozen, param_groups=optim.compile_groups(self._opt_spec, trained))
        if exported.buffers:  # carried from run to run on the device (PopTorch 4.8)
            extra["buffers"] = exported.buffers

        sets = settings.sets + self._block_ipus_sets(exported, settings.sets)

        def compile_to(path: Optional[str]) -> CompileResult:
            logger.info("compiling %s on %s", self._name(), self._connect().server)
            try:
                result = self._connect().compile(exported.onnx, settings.ipu_config or None,
                                                 set=sets, output=path, **extra)
            except errors.Error as error:
                if error.code == grpc.StatusCode.UNAUTHENTICATED:
                    _add_hint(error, "the front end takes the token from $IPUPOD_TOKEN or "
                                     "poptorch.Options().server(address, token=...)")
                raise
            logger.info("compiled %s in %.3f s on the server", self._name(),
                        result.compile_seconds)
            return result

        directory = self._options.executable_cache_dir
        if not directory:
            result = compile_to(output)
        else:
            name = _cache.key(exported.onnx, settings.ipu_config, sets, extra)
            result = _cache.lookup(directory, name)
            if result is not None:
                logger.info("%s: executable cache hit, %s (no compile)", self._name(),
                            result.path)
            else:
                result = _cache.store(directory, name, compile_to)
                logger.debug("%s: cached the executable as %s", self._name(), result.path)
            self._cached_ipx = result.path
            if output is not None:
                shutil.copyfile(result.path, output)
        for warning in result.warnings:  # nothing silent: what the compiler said, as warnings
            if "ipupod chose seed=" in warning:
                warning += " (in a PopTorch script: poptorch.Options().randomSeed(N))"
            warn(f"ipupod compile: {warning}")
        return result

    def _block_ipus_sets(self, exported: export.Exported, sets: List[str]) -> List[str]:
        """A model its blocks place uses ``exported.block_ipus`` IPUs per replica, as in
        PopTorch: the config says so too, unless the user's IPUConfig (or a per-IPU
        setAvailableMemoryProportion) chose a count, so the compiler warns only about a
        disagreement the user made, not about optimum's defaults."""
        prefix = "" if self._training else "inference_"
        chosen = {"ipus_per_replica", "inference_ipus_per_replica", "layers_per_ipu",
                  "inference_layers_per_ipu"} & set(self._options.ipu_config)
        if not exported.block_ipus or chosen or any(
                s.startswith(f"{prefix}ipus_per_replica=") for s in sets):
            return []
        return [f"{prefix}ipus_per_replica={exported.block_ipus}"]

    def _name(self) -> str:
        kind = "training" if self._training else "inference"
        return self._options.model_name or f"{kind} model {type(self._model).__name__}"

    def _connect(self) -> Client:
        if self._client is None:
            o = self._options
            self._client = Client(server=o.server_address, token=o.token, user=o.user)
        return self._client

    # ------------------------------------------------------------------ the device

    def attachToDevice(self) -> None:
        """Attaches to the IPUs the model needs, loads it and writes the module's weights
        (and, after ``detachFromDevice``, the optimizer state). Waits in ipupod's queue
        when ``$POPTORCH_WAIT_FOR_IPU`` is 1, else fails at once when no IPUs are free."""
        self._check_alive()
        if self._executable is None:
            raise ValueError("the model is not compiled yet: call it (or compile()) first")
        if self.isAttachedToDevice():
            raise ValueError("the model is already attached to IPUs")
        self._session = self._attach()
        try:
            program = self._load()
            # frozen parameters are constants of the executable, not writable weights
            writable = {spec.name for spec in program.weights}
            self._weights = [n for n in self._exported.weights if n in writable]
            self._constants = {n: v for n, v in self._constants.items() if n not in writable}
            self._write_state(attaching=True)
        except BaseException:
            self._session.release()
            self._session = None
            raise

    def _load(self) -> Any:
        """Loads the executable, compiling it again first if the server no longer holds it
        (its executable cache evicts the least recently used): the export is kept for that.
        An executable from the client-side cache is loaded from its file (uploaded only if
        the server lacks it), so it is never compiled again."""
        try:
            return self._session.load(self._cached_ipx or self._executable)
        except errors.Error as error:
            if error.code != grpc.StatusCode.NOT_FOUND or self._exported is None:
                raise
        self._executable = self._compile_exported(self._exported, None)
        return self._session.load(self._cached_ipx or self._executable)

    def _attach(self) -> Any:
        wait = os.environ.get("POPTORCH_WAIT_FOR_IPU", "") == "1"
        partition = self._partition_of_ipu_id()
        logger.info("%s: attaching to %d IPU(s)%s%s", self._name(), self._ipus,
                    f" in partition {partition}" if partition else "",
                    " (waiting in the queue if needed)" if wait else "")
        try:
            session = self._connect().attach(ipus=self._ipus, partition=partition, wait=wait,
                                             auto_round=self._options.auto_round_num_ipus)
        except errors.Error as error:
            if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not wait:
                _add_hint(error, "set POPTORCH_WAIT_FOR_IPU=1 to wait for the IPUs in "
                                 "ipupod's queue")
            raise
        logger.info("%s: attached, session %s on IPUs %s", self._name(), session.id,
                    session.ipus)
        return session

    def _partition_of_ipu_id(self) -> str:
        """Options.useIpuId(n): the partition of yours whose device id is n ("" without it).
        ipupod's attach takes a size and a partition, not a device id, so an id names a
        device only through a partition."""
        ipu_id = self._options.ipu_id
        if ipu_id is None:
            return ""
        needed = self._ipus
        if self._options.auto_round_num_ipus:
            needed = 1 << (needed - 1).bit_length()
        for partition in self._connect().list_partitions():
            if partition.device_id != ipu_id:
                continue
            if partition.size != needed:
                raise errors.Error(
                    f"useIpuId({ipu_id}) names partition '{partition.name}' of "
                    f"{partition.size} IPUs, but the model needs {needed} (its IPUs x "
                    f"replicationFactor); use the device id of a partition of {needed} IPUs",
                    code=grpc.StatusCode.INVALID_ARGUMENT, location="Options.useIpuId")
            return partition.name
        raise errors.Error(
            f"useIpuId({ipu_id}): no partition has device id {ipu_id}. ipupod attaches to IPUs "
            f"its scheduler picks, so a device id names a device only through a partition: "
            f"create one (`ipupod partition create NAME --size {needed}`) and pass its "
            f"device_id (`ipupod partition list`), or remove useIpuId",
            code=grpc.StatusCode.NOT_FOUND, location="Options.useIpuId")

    def _write_state(self, attaching: bool = False) -> None:
        state = dict(self._checkpoint or {})
        if attaching and isinstance(self._optimizer, optim._PoptorchOptimizer):
            state.update(self._optimizer.pending_device_state)  # load_state_dict's, once
            self._optimizer.pending_device_state = {}
        state.update(self._host_weights())
        self._sync.busy = True
        try:
            self._session.write_weights(state)
        finally:
            self._sync.busy = False
        self._checkpoint = None
        self._device_version = self._sync.host_version
        if self._pending_opt:
            self._session.set_optimizer(self._pending_opt)
            self._pending_opt = {}

    def _host_weights(self) -> Dict[str, torch.Tensor]:
        self._sync.busy = True
        try:
            state = self._model.state_dict()
        finally:
            self._sync.busy = False
        changed = [n for n, v in self._constants.items() if not torch.equal(state[n], v)]
        if changed:
            raise errors.Error(
                f"{', '.join(changed)} changed on the host, but the executable holds "
                f"{'them' if len(changed) > 1 else 'it'} as a constant (a parameter with "
                f"requires_grad=False in a training model, or an integer buffer), so the "
                f"device cannot be given the new value; wrap the model again to compile "
                f"with it", code=grpc.StatusCode.FAILED_PRECONDITION,
                location="PoplarExecutor.copyWeightsToDevice")
        return {name: state[name] for name in self._weights}

    def _maybe_constants(self, exported: export.Exported) -> Dict[str, torch.Tensor]:
        """The exported tensors the executable may hold as constants, with their values:
        integer ones, and in training every one but a trained parameter (frozen ones and
        buffers the model does not update). attachToDevice keeps those the loaded program
        does not list as weights."""
        state = self._model.state_dict()
        parameters = {n for n, _ in self._model.named_parameters()}
        trained = parameters - set(export.frozen(self._model, exported, self._optimizer))
        return {n: state[n].detach().clone() for n in exported.weights
                if not state[n].is_floating_point()
                or (self._training and n not in trained)}

    def isAttachedToDevice(self) -> bool:
        """True while the model holds its IPUs."""
        return self._session is not None and not self._session.ended

    def detachFromDevice(self) -> None:
        """Gives the IPUs back. Training state (weights and optimizer state) is copied to
        the host first and written back by ``attachToDevice``. When a device fault prevents
        that copy, the IPUs are released anyway and the fault is raised: the module keeps
        the weights of its last copy, which ``attachToDevice`` writes."""
        if not self.isAttachedToDevice():
            raise ValueError("the model is not attached to IPUs")
        try:
            if self._training:
                self._checkpoint = self._session.read_checkpoint()
                if self._sync.dirty is self:
                    self._copy_to_module(self._checkpoint)
        finally:
            if self._sync.dirty is self:
                self._sync.dirty = None
            self._session.release()
            self._session = None

    def destroy(self) -> None:
        """Copies trained weights to the module, releases the IPUs and the connection; the
        executor cannot be used afterwards."""
        if self._destroyed:
            return
        if self._sync.dirty is self and self.isAttachedToDevice():
            self.copyWeightsToHost()
        if isinstance(self._optimizer, optim._PoptorchOptimizer) and self.isAttachedToDevice():
            # for its state_dict(), and for a model wrapped with it again
            state = self._optimizer_state()
            self._optimizer.device_state = self._optimizer.pending_device_state = state
        if self._session is not None:
            self._session.release()
        if self._client is not None:
            self._client.close()
        self._session = self._client = None
        self._destroyed = True

    def _check_alive(self) -> None:
        if self._destroyed:
            raise ValueError("this model was destroyed; wrap the module again")

    # ------------------------------------------------------------------ weights

    def copyWeightsToHost(self) -> None:
        """Writes the device's weights into the module's own parameters and buffers."""
        if not self.isAttachedToDevice():
            return
        self._sync.busy = True
        try:
            arrays = self._session.read_weights(self._weights)
        finally:
            self._sync.busy = False
        self._copy_to_module(arrays)

    def _copy_to_module(self, arrays: Dict[str, Any]) -> None:
        self._sync.busy = True
        try:
            state = self._model.state_dict()
            with torch.no_grad():
                for name in self._weights:
                    if name in arrays:
                        state[name].copy_(torch.from_numpy(arrays[name]).reshape(
                            state[name].shape))
        finally:
            self._sync.busy = False
        if self._sync.dirty is self:
            self._sync.dirty = None
        self._sync.host_version += 1
        self._device_version = self._sync.host_version

    def copyWeightsToDevice(self) -> None:
        """Writes the module's parameters and buffers to the device (after the module was
        changed on the host)."""
        if self.isAttachedToDevice():
            logger.debug("%s: copying the weights to the device", self._name())
            self._write_state()

    def _sync_before_run(self) -> None:
        dirty = self._sync.dirty
        if dirty is not None and dirty is not self:
            dirty.copyWeightsToHost()
        if self._device_version != self._sync.host_version:
            self.copyWeightsToDevice()

    # ------------------------------------------------------------------ optimizer

    def _bind_optimizer(self, optimizer: Any) -> None:
        """A poptorch optimizer's state_dict reads this model's device state."""
        if isinstance(optimizer, optim._PoptorchOptimizer):
            executor = weakref.ref(self)
            optimizer._read_device_state = lambda: (executor() and executor()._optimizer_state())

    def _optimizer_state(self) -> Dict[str, Any]:
        """The device's optimizer state (``optimizer/...`` tensors), {} when detached."""
        if not self.isAttachedToDevice():
            return {}
        checkpoint = self._session.read_checkpoint()
        return {k: v for k, v in checkpoint.items() if k.startswith("optimizer/")}

    def setOptimizer(self, optimizer: Any) -> None:
        """Applies a changed optimizer's variables (``lr``, ``momentum``, ...) to later
        calls; a changed constant or optimizer kind is an error, as in PopTorch."""
        if not self._training:
            raise ValueError("setOptimizer is for training models")
        new = optim.describe(optimizer, self._model)
        self._bind_optimizer(optimizer)
        if self._exported is None:
            self._optimizer, self._opt_spec = optimizer, new
            return
        changed = optim.changes(self._opt_spec, new)
        self._optimizer = optimizer
        self._opt_spec = optim.applied(self._opt_spec, changed)
        if not changed:
            return
        if self.isAttachedToDevice():
            self._session.set_optimizer(changed)
        else:
            self._pending_opt.update(changed)

    # ------------------------------------------------------------------ precompilation

    def compileAndExport(self, filename: str, *args: Any, export_model: bool = True,
                         **kwargs: Any) -> None:
        """Compiles for these inputs (on the server; no IPU is needed) and writes the
        executable, with the module (pickled) unless ``export_model=False``, to
        ``filename``; ``poptorch.load`` (or ``loadExecutable``) reads it back."""
        self._check_alive()
        with tempfile.TemporaryDirectory() as directory:
            ipx = os.path.join(directory, "model.ipx")
            if self._exported is None:
                self._compile(args, kwargs, output=ipx)
            else:
                self._compile_exported(self._exported, ipx)
            with open(ipx, "rb") as file:
                data = self._export_data(file.read(), export_model)
        with self._sync.detached_hooks():
            torch.save(data, filename)

    def _export_data(self, ipx: bytes, export_model: bool) -> Dict[str, Any]:
        return {"format": _FORMAT, "ipx": ipx, "exported": dataclasses.asdict(self._exported),
                "ipus": self._ipus, "samples": self._samples,
                "input_samples": self._input_samples, "training": self._training,
                "options": self._options, "optimizer": self._opt_spec,
                "model": self._model if export_model else None}

    def loadExecutable(self, filename: str) -> None:
        """Uses the executable ``compileAndExport`` wrote instead of compiling."""
        self._adopt(_read_export(filename))

    def _adopt(self, data: Dict[str, Any]) -> None:
        if data["training"] != self._training:
            kind = "training" if data["training"] else "inference"
            raise ValueError(f"the file holds a {kind} executable; wrap the model with "
                             f"poptorch.{kind}Model")
        self._exported = export.Exported(**data["exported"])
        self._executable = data["ipx"]
        self._ipus, self._samples = data["ipus"], data["samples"]
        self._input_samples = list(data.get("input_samples") or [])
        if self._training and data["optimizer"] is not None:
            self._opt_spec = data["optimizer"]


def _no_perf_counters() -> Dict[str, List[List[float]]]:
    return {"input": [[]], "input_complete": [[]], "output": [[]], "output_complete": [[]]}


def _transfer(begun: List[List[float]], done: List[List[float]], sizes: List[int], t: float,
              seconds: float) -> None:
    """One copy of every tensor, one after another from ``t``, each taking its share of
    ``seconds`` by bytes; each starts being requested at ``t``."""
    total, moved = sum(sizes), 0
    for index, size in enumerate(sizes):
        moved += size
        begun[index].append(t)
        done[index].append(t + seconds * (moved / total if total else 1.0))


def _register_hook(hooks: "collections.OrderedDict[int, Callable[[], None]]", hook: Any,
                   what: str) -> Any:
    import torch.utils.hooks
    if not callable(hook):
        raise RuntimeError(f"{what} hook must be callable")
    handle = torch.utils.hooks.RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Callable[[], None]) -> Any:  # noqa: N802 - PopTorch's name
    """Calls ``hook()`` before every compile; returns a handle whose ``remove()`` stops it."""
    return _register_hook(_PRECOMPILE_HOOKS, hook, "Pre-compile")


def registerPostCompileHook(hook: Callable[[], None]) -> Any:  # noqa: N802 - PopTorch's name
    """Calls ``hook()`` after every compile; returns a handle whose ``remove()`` stops it."""
    return _register_hook(_POSTCOMPILE_HOOKS, hook, "Post-compile")


def _read_export(filename: str) -> Dict[str, Any]:
    data = torch.load(filename)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"'{filename}' is not a file poptorch's compileAndExport wrote")
    return data


def inferenceModel(model: torch.nn.Module, options: Optional[Options] = None  # noqa: N802
                   ) -> PoplarExecutor:
    """Wraps ``model`` for inference on ipupod (exported in eval mode)."""
    return PoplarExecutor(model, options, training=False)


def trainingModel(model: torch.nn.Module, options: Optional[Options] = None,  # noqa: N802
                  optimizer: Any = None) -> PoplarExecutor:
    """Wraps ``model`` for training on ipupod: each call is forward, backward and the
    optimizer's update (``torch.optim.SGD(lr=0.01)`` unless ``optimizer`` is given)."""
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def load(filename: str, edit_opts_fn: Optional[Callable[[Options], None]] = None
         ) -> PoplarExecutor:
    """A wrapped model from a ``compileAndExport`` file (with its module); ``edit_opts_fn``
    may change run-time options (the server to use) first."""
    data = _read_export(filename)
    if data["model"] is None:
        raise ValueError(f"'{filename}' was exported without its model (export_model=False): "
                         f"wrap the model again and call loadExecutable('{filename}')")
    options: Options = data["options"]
    if edit_opts_fn is not None:
        edit_opts_fn(options)
    executor = PoplarExecutor(data["model"], options, data["training"])
    executor._adopt(data)
    return executor


__all__: List[str] = ["PoplarExecutor", "inferenceModel", "load", "registerPostCompileHook",
                      "registerPreCompileHook", "trainingModel"]
