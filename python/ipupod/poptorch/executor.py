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

import dataclasses
import os
import tempfile
import weakref
from typing import Any, Callable, Dict, List, Optional

import grpc
import torch

from ipupod import errors
from ipupod.client import Client
from ipupod.compiling import CompileResult
from ipupod.poptorch import export, optim
from ipupod.poptorch.options import Options

_FORMAT = "ipupod.poptorch/1"


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


def _precision(model: torch.nn.Module, inputs: tuple) -> torch.dtype:
    """torch.float or torch.half: every float parameter, buffer and input must agree
    (``model.half()`` with half inputs, or all float32); anything else is refused."""
    named = list(model.state_dict().items()) + [(f"input {i}", t) for i, t in enumerate(inputs)]
    floats = [(name, t.dtype) for name, t in named if t.is_floating_point()]
    kinds = {dtype for _, dtype in floats}
    if not kinds <= {torch.float, torch.half}:
        name, dtype = next((n, d) for n, d in floats if d not in (torch.float, torch.half))
        raise ValueError(f"{name} is {dtype}; ipupod computes in float32 or float16: use "
                         f"model.float() or model.half() and inputs of the same type")
    if len(kinds) > 1:
        half = next(n for n, d in floats if d == torch.half)
        full = next(n for n, d in floats if d == torch.float)
        raise ValueError(f"{half} is float16 but {full} is float32; ipupod runs a model all in "
                         f"float32 or all in float16: call model.half() and pass half inputs")
    return torch.half if kinds == {torch.half} else torch.float


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
        self._options = (options or Options()).clone()
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
        self._samples = 0
        self._weights: List[str] = []  # the module's tensors the device holds as weights
        self._device_version = -1
        self._checkpoint: Optional[Dict[str, Any]] = None
        self._destroyed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_model"), name)

    def __repr__(self) -> str:
        kind = "training" if self._training else "inference"
        return f"<poptorch.PoplarExecutor {kind} {type(self._model).__name__}>"

    @property
    def options(self) -> Options:
        """The options this model was wrapped with (a copy of the caller's)."""
        return self._options

    # ------------------------------------------------------------------ running

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs one call: its batch is micro-batch x deviceIterations x replicationFactor
        (x gradientAccumulation when training). Compiles and attaches first if needed."""
        self._check_alive()
        if self._exported is None:
            self._compile(args, kwargs)
        if not self.isAttachedToDevice():
            self.attachToDevice()
        self._sync_before_run()
        return self._run(export.positional(self._model, args, kwargs))

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compiles for these inputs and loads onto the IPUs, without running."""
        self._check_alive()
        if self._exported is None:
            self._compile(args, kwargs)
        if not self.isAttachedToDevice():
            self.attachToDevice()

    def _run(self, inputs: tuple) -> Any:
        names = self._exported.inputs
        if inputs and inputs[0].dim() and inputs[0].shape[0] != self._samples:
            raise ValueError(f"the model was compiled for calls of {self._samples} samples "
                             f"({self._rule()}), not {inputs[0].shape[0]}; keep the batch "
                             f"of the first call")
        arrays = {n: t.detach().cpu().contiguous().numpy() for n, t in zip(names, inputs)}
        result = self._session.run(arrays)
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

    # ------------------------------------------------------------------ compiling

    def _combined(self) -> int:
        o = self._options
        combined = o.device_iterations * o.replication_factor
        return combined * o.Training.gradient_accumulation if self._training else combined

    def _rule(self) -> str:
        o = self._options
        text = f"micro-batch x deviceIterations {o.device_iterations} x replicationFactor " \
               f"{o.replication_factor}"
        if self._training:
            text += f" x gradientAccumulation {o.Training.gradient_accumulation}"
        return text

    def _compile(self, args: tuple, kwargs: Dict[str, Any], output: Optional[str] = None
                 ) -> None:
        inputs = export.positional(self._model, args, kwargs)
        precision = _precision(self._model, inputs)
        names = export.input_names(self._model, len(args),
                                   {k: v for k, v in kwargs.items() if v is not None})
        micro = export.micro_batch(inputs, names, self._combined(), self._rule())
        try:
            exported = export.export(self._model, tuple(t[:micro] for t in inputs), names,
                                     self._training, self._options.execution_strategy,
                                     half=precision == torch.half)
        except (RuntimeError, torch.onnx.errors.OnnxExporterError) as error:
            raise _export_error(error) from None
        self._executable = self._compile_exported(exported, output)
        self._exported = exported
        self._samples = micro * self._combined()
        self._ipus = int(self._executable.summary.get("ipus", {}).get("reserved", 1))

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
        elif exported.buffers:  # carried from run to run on the device (PopTorch 4.8)
            extra = dict(buffers=exported.buffers)
        try:
            return self._connect().compile(exported.onnx, settings.ipu_config or None,
                                           set=settings.sets, output=output, **extra)
        except errors.Error as error:
            if error.code == grpc.StatusCode.UNAUTHENTICATED:
                _add_hint(error, "the front end takes the token from $IPUPOD_TOKEN or "
                                 "poptorch.Options().server(address, token=...)")
            raise

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
            self._write_state(attaching=True)
        except BaseException:
            self._session.release()
            self._session = None
            raise

    def _load(self) -> Any:
        """Loads the executable, compiling it again first if the server no longer holds it
        (its executable cache evicts the least recently used): the export is kept for that."""
        try:
            return self._session.load(self._executable)
        except errors.Error as error:
            if error.code != grpc.StatusCode.NOT_FOUND or self._exported is None:
                raise
        self._executable = self._compile_exported(self._exported, None)
        return self._session.load(self._executable)

    def _attach(self) -> Any:
        wait = os.environ.get("POPTORCH_WAIT_FOR_IPU", "") == "1"
        try:
            return self._connect().attach(ipus=self._ipus, wait=wait,
                                          auto_round=self._options.auto_round_num_ipus)
        except errors.Error as error:
            if error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not wait:
                _add_hint(error, "set POPTORCH_WAIT_FOR_IPU=1 to wait for the IPUs in "
                                 "ipupod's queue")
            raise

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
        return {name: state[name] for name in self._weights}

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
                "ipus": self._ipus, "samples": self._samples, "training": self._training,
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
        if self._training and data["optimizer"] is not None:
            self._opt_spec = data["optimizer"]


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


__all__: List[str] = ["PoplarExecutor", "inferenceModel", "load", "trainingModel"]
