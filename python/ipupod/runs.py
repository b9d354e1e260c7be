"""Steps, inference and training over a session: what ``ipupod run`` does, as a library.

A *step* is one ``ExecutionService.Run``: the executable's samples_per_step rows of every
input (micro-batch x device_iterations x replication, and x gradient_accumulation_steps for
training), dim 0 of the host shapes ``LoadedProgram.inputs`` gives. :func:`plan_steps` checks
a whole data set against the loaded program (every input present, nothing extra, dtype and
per-sample shape, one sample count, a multiple of a step) exactly as the CLI's
device/runtime/run_steps.cc does, so a mistake is found before anything runs.

:func:`infer` runs every step and concatenates the outputs along dim 0 (a scalar per step is
one row). :func:`train` is the training driver of common/driver/training_driver.h: run r takes data
step (first + r) mod steps; a host copy (the whole training state: ReadWeights(checkpoint)) is
taken before the first run, every ``checkpoint_every`` runs and after the last; with
``recover`` a recoverable fault is recovered from the last host copy (the reset its recovery
action names - a FULL_RESET waits for an admin's ``ipupod pod reset`` - then load again, write
the host copy back and repeat the runs since it), at most ``max_recoveries`` times.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol

import grpc
import numpy as np

from ipupod import errors, tensors
from ipupod._proto import execution_pb2

#: How long a load retries while the IPUs come back from a reset (UNAVAILABLE).
RESET_WAIT_SECONDS = 30.0
#: How long a recovery waits for an admin's pod reset after a FULL_RESET fault.
FULL_RESET_WAIT_SECONDS = 600.0
POLL_SECONDS = 0.05


class Steps(Protocol):
    """What :func:`infer` and :func:`train` need of a session (:class:`ipupod.Session` is
    one): its loaded program, a step, the training state, and the recovery operations."""

    @property
    def program(self) -> execution_pb2.LoadedProgram: ...

    def run(self, inputs: Mapping[str, Any]) -> RunResult: ...

    def read_checkpoint(self) -> Dict[str, np.ndarray]: ...

    def write_weights(self, weights: Mapping[str, Any]) -> Any: ...

    def set_optimizer(self, variables: Optional[Mapping[str, float]] = None,
                      **kwargs: float) -> Any: ...

    def refresh(self) -> Any: ...

    def reset(self) -> Any: ...

    def load_again(self, timeout: float) -> Any: ...


@dataclasses.dataclass
class RunResult:
    """What one step returned: the outputs by ONNX name, in the executable's order, and the
    server's measurements (``RunStats``: samples, wall and simulated seconds, flops, losses)."""

    outputs: Dict[str, np.ndarray]
    stats: execution_pb2.RunStats

    @property
    def losses(self) -> List[float]:
        """Training: the loss of each weight update of this step, in order."""
        return list(self.stats.losses)

    @property
    def loss_scales(self) -> List[float]:
        """Training: the loss scale each weight update's gradients were computed with (the
        optimizer's ``loss_scaling``, or where ``auto_loss_scaling`` had moved it)."""
        return list(self.stats.loss_scales)

    @property
    def log(self) -> List[str]:
        """What the model's ``poptorch.ipu_print_tensor`` ops printed this step, in order."""
        return list(self.stats.log)


@dataclasses.dataclass
class StepPlan:
    """A data set cut into steps: inputs in the program's order, ``steps`` steps, each
    taking ``rows[name]`` rows of input ``name`` (inputs whose dim 0 differ, a [4, 8] batch
    beside a [1, 8] mask, give a step different numbers of rows)."""

    inputs: Dict[str, np.ndarray]
    samples: int
    rows: Dict[str, int]
    steps: int

    def step(self, index: int) -> Dict[str, np.ndarray]:
        return {name: array[index * self.rows[name]:(index + 1) * self.rows[name]]
                for name, array in self.inputs.items()}


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` did: every weight update's loss, the runs made, the recoveries and
    the last host copy of the training state (a checkpoint: write it back with
    ``Session.write_weights`` to resume exactly)."""

    losses: List[float]
    runs: int
    recoveries: int
    checkpoint: Optional[Dict[str, np.ndarray]]
    outputs: Optional[Dict[str, np.ndarray]] = None


@dataclasses.dataclass
class RunProgress:
    """Handed to ``on_run`` after each run: 0-based ``run`` of ``runs`` and its result."""

    run: int
    runs: int
    result: RunResult
    wall_seconds: float


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _step_size_text(program: execution_pb2.LoadedProgram) -> str:
    shape = program.run_shape
    accumulation = (f" x gradient_accumulation_steps "
                    f"{program.training.gradient_accumulation_steps}"
                    if program.HasField("training") else "")
    return (f"micro-batch {shape.micro_batch_size}{accumulation} x device_iterations "
            f"{shape.device_iterations} x replication {shape.replication_factor}")


def _check_input(spec: execution_pb2.TensorSpec, array: np.ndarray, location: str) -> None:
    want = list(spec.shape)
    got = list(array.shape)
    shape_ok = bool(got) and len(got) == len(want) and got[1:] == want[1:]
    if tensors.wire_dtype_name(array.dtype) == spec.dtype and shape_ok:
        return
    per_sample = "[N]" if len(want) <= 1 else "[N, " + ", ".join(map(str, want[1:])) + "]"
    raise errors.local_error(
        f"input '{spec.name}' is {tensors.wire_dtype_name(array.dtype)}{_shape_text(got)} but "
        f"the model takes {spec.dtype}{per_sample} (N samples, {want[0] if want else 1} per "
        f"step); pass it with that shape", grpc.StatusCode.INVALID_ARGUMENT, location)


def plan_steps(program: execution_pb2.LoadedProgram, inputs: Mapping[str, Any],
               location: str) -> StepPlan:
    """Checks ``inputs`` against the loaded program and cuts them into steps (module doc)."""
    arrays = tensors.to_arrays(inputs, location)
    if not program.inputs:
        raise errors.local_error(
            "the model takes no inputs, and ipupod runs steps of samples, so it cannot run a "
            "model without inputs (docs/differences.md, Buffers)",
            grpc.StatusCode.INVALID_ARGUMENT, location)
    names = [spec.name for spec in program.inputs]
    for name in arrays:
        if name not in names:
            raise errors.local_error(
                f"'{name}' is not an input of the model (inputs: {', '.join(names)}); remove "
                f"it or rename it", grpc.StatusCode.INVALID_ARGUMENT, location)
    ordered: Dict[str, np.ndarray] = {}
    rows: Dict[str, int] = {}
    steps = None
    for spec in program.inputs:
        if spec.name not in arrays:
            raise errors.local_error(
                f"input '{spec.name}' is missing (given: {', '.join(arrays) or 'none'})",
                grpc.StatusCode.INVALID_ARGUMENT, location)
        array = arrays[spec.name]
        _check_input(spec, array, location)
        per_step = spec.shape[0] if spec.shape else 1
        _check_rows(program, spec.name, array.shape[0], per_step, location)
        if steps is not None and array.shape[0] // per_step != steps:
            first = names[0]
            raise errors.local_error(
                f"inputs disagree on the number of steps: '{first}' has "
                f"{ordered[first].shape[0]} rows (dim 0), {rows[first]} per step, "
                f"'{spec.name}' has {array.shape[0]}, {per_step} per step; give every input "
                f"the same number of steps", grpc.StatusCode.INVALID_ARGUMENT, location)
        steps = array.shape[0] // per_step
        ordered[spec.name], rows[spec.name] = array, per_step
    samples_per_step = program.run_shape.samples_per_step or rows[names[0]]
    return StepPlan(inputs=ordered, samples=steps * samples_per_step, rows=rows, steps=steps)


def _check_rows(program: execution_pb2.LoadedProgram, name: str, count: int, per_step: int,
                location: str) -> None:
    """An input's rows make whole steps of its own rows per step."""
    if count and count % per_step == 0:
        return
    what = (f"the inputs have {count} samples (dim 0), not a positive multiple of the "
            f"{per_step} samples of one step"
            if per_step == program.run_shape.samples_per_step else
            f"input '{name}' has {count} rows (dim 0), not a positive multiple of the "
            f"{per_step} rows one step takes of it")
    raise errors.local_error(
        f"{what} ({_step_size_text(program)}); pass {per_step} x N, or recompile",
        grpc.StatusCode.INVALID_ARGUMENT, location)


class _Concatenation:
    """The outputs of consecutive steps, concatenated along dim 0 (a scalar is one row)."""

    def __init__(self) -> None:
        self._parts: Dict[str, List[np.ndarray]] = {}

    def append(self, outputs: Mapping[str, np.ndarray]) -> None:
        for name, array in outputs.items():
            self._parts.setdefault(name, []).append(array.reshape(1) if array.ndim == 0
                                                    else array)

    def finish(self) -> Dict[str, np.ndarray]:
        return {name: np.concatenate(parts) for name, parts in self._parts.items()}


def infer(session: Steps, inputs: Mapping[str, Any],
          on_step: Optional[Callable[[RunProgress], None]] = None) -> Dict[str, np.ndarray]:
    """Every step of ``inputs`` on the loaded (inference) program; the outputs concatenated."""
    plan = plan_steps(session.program, inputs, "Session.infer")
    outputs = _Concatenation()
    for step in range(plan.steps):
        started = time.monotonic()
        result = session.run(plan.step(step))
        outputs.append(result.outputs)
        if on_step is not None:
            on_step(RunProgress(step, plan.steps, result, time.monotonic() - started))
    return outputs.finish()


@dataclasses.dataclass
class _Training:
    """The state of one :func:`train` call."""

    session: Steps
    plan: StepPlan
    runs: int
    first_step: int
    checkpoint_every: int
    recover: bool
    max_recoveries: int
    on_run: Optional[Callable[[RunProgress], None]]
    keep_outputs: bool
    losses: Dict[int, List[float]] = dataclasses.field(default_factory=dict)
    outputs: Dict[int, Dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    copy: Optional[Dict[str, np.ndarray]] = None
    copy_runs: int = 0
    recoveries: int = 0


def train(session: Steps, inputs: Mapping[str, Any], *, epochs: Optional[int] = None,
          steps: Optional[int] = None, lr: Optional[float] = None, checkpoint_every: int = 0,
          recover: bool = False, max_recoveries: int = 3,
          resume: Optional[Mapping[str, Any]] = None,
          on_run: Optional[Callable[[RunProgress], None]] = None,
          keep_outputs: bool = False) -> TrainResult:
    """Trains the loaded training program on ``inputs``; see :meth:`Session.train`."""
    location = "Session.train"
    program = session.program
    if not program.HasField("training"):
        raise errors.local_error(
            "the loaded executable was compiled for inference; compile it with `ipupod compile "
            "--train` to train", grpc.StatusCode.FAILED_PRECONDITION, location)
    if (epochs is None) == (steps is None) or (epochs or steps or 0) <= 0:
        raise errors.local_error(
            "train() needs how long to train: epochs=E (passes over the inputs) or steps=K "
            "(weight updates), exactly one, positive", grpc.StatusCode.INVALID_ARGUMENT, location)
    plan = plan_steps(program, inputs, location)
    iterations = max(int(program.run_shape.device_iterations), 1)
    if steps is not None and steps % iterations != 0:
        raise errors.local_error(
            f"steps={steps} is not a multiple of device_iterations ({iterations}): one run makes "
            f"{iterations} weight updates; pass steps={(steps // iterations + 1) * iterations} "
            f"or recompile", grpc.StatusCode.INVALID_ARGUMENT, location)
    runs = epochs * plan.steps if epochs is not None else steps // iterations
    first = 0
    if resume is not None:
        session.write_weights(resume)
        done = int(np.asarray(resume.get("optimizer/step", 0)).reshape(-1)[0]) if (
            "optimizer/step" in resume) else 0
        first = (done // iterations) % plan.steps
    if lr is not None:
        session.set_optimizer(lr=lr)
    every = checkpoint_every if checkpoint_every > 0 else (1 if recover else 0)
    state = _Training(session, plan, runs, first, every, recover, max_recoveries, on_run,
                      keep_outputs)
    _drive(state)
    losses = [loss for run in range(runs) for loss in state.losses.get(run, [])]
    outputs = None
    if keep_outputs:
        joined = _Concatenation()
        for run in range(runs):
            joined.append(state.outputs[run])
        outputs = joined.finish()
    return TrainResult(losses=losses, runs=runs, recoveries=state.recoveries,
                       checkpoint=state.copy, outputs=outputs)


def _take_copy(state: _Training, runs_done: int) -> None:
    state.copy = state.session.read_checkpoint()
    state.copy_runs = runs_done


def _drive(state: _Training) -> None:
    run = 0
    if state.checkpoint_every:
        _take_copy(state, 0)
    while run < state.runs:
        try:
            run = _one_run(state, run)
        except errors.RecoverableError as fault:
            if not state.recover or state.copy is None:
                raise
            run = _recover(state, fault, run)


def _recover(state: _Training, fault: errors.RecoverableError, run: int) -> int:
    """Recovers from ``fault`` in run ``run``; a fault while recovering counts as another
    recovery. Returns the run to go on from (the last host copy's)."""
    while True:
        if state.recoveries >= state.max_recoveries:
            raise _with_context(fault, f"run {run + 1} of {state.runs}: gave up after "
                                f"{state.recoveries} recoveries")
        state.recoveries += 1
        try:
            _restore(state, fault)
            return state.copy_runs
        except errors.RecoverableError as again:
            fault = again


def _one_run(state: _Training, run: int) -> int:
    started = time.monotonic()
    step = (state.first_step + run) % state.plan.steps
    result = state.session.run(state.plan.step(step))
    state.losses[run] = result.losses
    if state.keep_outputs:
        state.outputs[run] = result.outputs
    done = run + 1
    if state.checkpoint_every and (done % state.checkpoint_every == 0 or done == state.runs):
        _take_copy(state, done)
    if state.on_run is not None:
        state.on_run(RunProgress(run, state.runs, result, time.monotonic() - started))
    return done


def _restore(state: _Training, fault: errors.RecoverableError) -> None:
    """The reset the fault names, a load and the host copy written back."""
    session = state.session
    if fault.recovery_action == "FULL_RESET":
        wait_for_pod_reset(session, fault, FULL_RESET_WAIT_SECONDS)
    else:
        session.reset()
    session.load_again(RESET_WAIT_SECONDS)
    session.write_weights(state.copy)


def wait_for_pod_reset(session: Steps, fault: errors.RecoverableError,
                       timeout: float) -> None:
    """After a FULL_RESET fault: polls the session until its IPUs no longer wait for an admin's
    ``ipupod pod reset`` (driver::WaitForPodReset). Raises the fault, saying how long it
    waited, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            session.refresh()
            return
        except errors.RecoverableError as error:
            if error.recovery_action != "FULL_RESET":
                return  # another recoverable fault: the next load surfaces it
        except errors.Error as error:
            if error.code != grpc.StatusCode.UNAVAILABLE:  # resetting: back soon
                raise
            return
        if time.monotonic() >= deadline:
            raise _with_context(fault, f"waited {timeout:g} s for an admin to run "
                                "`ipupod pod reset`")
        time.sleep(POLL_SECONDS * 10)


def _with_context(error: errors.Error, context: str) -> errors.Error:
    error.message = f"{context}: {error.message}"
    error.args = (error.message,)
    return error
