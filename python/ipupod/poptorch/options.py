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
import enum
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Union

from ipupod.poptorch.blocks import ExecutionStrategy, PipelinedExecution, ShardedExecution


class OutputMode(enum.Enum):
    """Which micro-batches' results a call returns (PopTorch's ``OutputMode``)."""

    All = "all"
    Final = "final"
    Sum = "sum"
    EveryN = "every_n"
    Default = "default"


class _TrainingOptions:
    """``opts.Training``: the training options PopTorch keeps apart."""

    def __init__(self) -> None:
        self.gradient_accumulation = 1
        self.auto_loss_scaling = False

    def gradientAccumulation(self, steps: int) -> "_TrainingOptions":
        """Micro-batches whose gradients are summed into one weight update."""
        self.gradient_accumulation = _positive(steps, "Training.gradientAccumulation")
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> "_TrainingOptions":
        """The loss scale starts at the optimizer's ``loss_scaling`` and moves by factors of
        2 after every update (IPUConfig ``auto_loss_scaling``; docs/differences.md)."""
        self.auto_loss_scaling = bool(enabled)
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


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} takes a positive integer, not {value!r}")
    return value


def _not_modelled(what: str, why: str) -> None:
    raise ValueError(f"{what} is not modelled by ipupod ({why}); remove it (docs/differences.md "
                     f"lists what differs from PopTorch)")


class Options:
    """PopTorch's ``poptorch.Options`` for ipupod: how a wrapped model is compiled and run.

    Setters return the options, so they chain: ``Options().deviceIterations(4)
    .replicationFactor(2)``. Anything else PopTorch offers raises ``AttributeError``
    (not there) or ``ValueError`` (there, but not modelled by ipupod, saying why).
    """

    def __init__(self) -> None:
        self.Training = _TrainingOptions()
        self.Precision = _PrecisionOptions()
        self.device_iterations = 1
        self.replication_factor = 1
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

    # ------------------------------------------------------------------ PopTorch's setters

    def deviceIterations(self, iterations: int) -> "Options":
        """Micro-batches (training: weight updates) per call of the model."""
        self.device_iterations = _positive(iterations, "deviceIterations")
        return self

    def replicationFactor(self, replicas: int) -> "Options":
        """Copies of the model, each on its own IPUs, each taking its own micro-batches."""
        self.replication_factor = _positive(replicas, "replicationFactor")
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
        """``PipelinedExecution`` (the default) or ``ShardedExecution``, with their stages."""
        if not isinstance(strategy, ExecutionStrategy):
            raise ValueError(f"setExecutionStrategy takes PipelinedExecution or "
                             f"ShardedExecution, not {strategy!r}")
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

    def enableExecutableCaching(self, path: str) -> "Options":
        """Accepted: the server keeps every compiled executable in its cache by hash, so a
        second identical compile is cheap; ``path`` is kept for ``compileAndExport``."""
        self.executable_cache_dir = os.fspath(path)
        return self

    def useIpuModel(self, use: bool) -> "Options":
        """Accepted: every ipupod IPU is simulated."""
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> "Options":
        """Accepted: models compile on the server, which needs no free IPU to compile."""
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":
        """Refused when True: ipupod always runs on the data a call passes."""
        if enabled:
            _not_modelled("enableSyntheticData(True)", "every run takes the call's inputs")
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
        """An optimum-graphcore IPUConfig (a dict, JSON text or an ipu_config.json path);
        PopTorch's setters override its keys."""
        if isinstance(config, Mapping):
            self.ipu_config = dict(config)
        elif os.fspath(config).lstrip().startswith("{"):
            self.ipu_config = json.loads(os.fspath(config))
        else:
            with open(config, encoding="utf-8") as file:
                self.ipu_config = json.load(file)
        return self

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
        half = self.Precision.half_partials
        if half is not None or "enable_half_partials" not in self.ipu_config:
            sets.append(f"enable_half_partials={'true' if half else 'false'}")
        if isinstance(self.execution_strategy, ShardedExecution):
            if training:
                _not_modelled("ShardedExecution for training",
                              "ipupod trains pipelined; use PipelinedExecution")
            sets.append("sharded_execution_for_inference=true")
        sets += self._memory_proportion_sets(prefix)
        return CompileSettings(ipu_config=dict(self.ipu_config), sets=sets)

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
        from ipupod import poptorch  # the name config files use: poptorch.ShardedExecution()
        try:
            call = ast.parse(line, mode="eval").body
            if not isinstance(call, ast.Call):
                raise ValueError("not a setter call")
            eval(compile(ast.Expression(body=call), where, "eval"),  # noqa: S307 - the user's file
                 {"__builtins__": {}, "poptorch": poptorch, "True": True, "False": False},
                 {"__options": self, **_setters(self)})
        except (SyntaxError, ValueError, AttributeError, TypeError) as error:
            raise ValueError(f"{where}: cannot apply '{line}': {error}; each line must be one "
                             f"Options setter call, e.g. deviceIterations(4)") from None

    def __repr__(self) -> str:
        return (f"poptorch.Options(deviceIterations={self.device_iterations}, "
                f"replicationFactor={self.replication_factor}, gradientAccumulation="
                f"{self.Training.gradient_accumulation}, outputMode={self.output_mode}, "
                f"strategy={type(self.execution_strategy).__name__})")


def _setters(options: Options) -> Dict[str, Any]:
    names = [n for n in dir(options) if not n.startswith("_") and n[0].islower()]
    return {**{n: getattr(options, n) for n in names}, "Training": options.Training,
            "Precision": options.Precision}


class CompileSettings:
    """What :meth:`Options.compile_settings` gives ``Client.compile``."""

    def __init__(self, ipu_config: Dict[str, Any], sets: List[str]) -> None:
        self.ipu_config = ipu_config
        self.sets = sets
