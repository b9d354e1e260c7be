"""A session: IPUs held by this client (or by another process) and what runs on them.

:meth:`ipupod.Client.attach` returns a :class:`Session` that owns its attach stream: the IPUs
are held until :meth:`Session.release` (or the end of a ``with`` block), the end of the
process, or the server ending the session. :meth:`ipupod.Client.session` returns a handle on
a session someone else holds (e.g. ``ipupod attach -- python train.py``: ``$IPUPOD_SESSION``);
its release does nothing.

Operations on a session are ExecutionService calls (proto/ipupod/v1/execution.proto): load an
executable, write and read weights, run steps, set the optimizer. The server runs one at a
time per session; a device fault on the session's IPUs raises :class:`ipupod.RecoverableError`
or :class:`ipupod.UnrecoverableError` from the next one.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Union

import grpc
import numpy as np

from ipupod import errors, runs, tensors
from ipupod._proto import execution_pb2, pod_pb2
from ipupod.attach import AttachStream
from ipupod.calls import Caller
from ipupod.compiling import CompileResult

Executable = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview,
                   execution_pb2.ExecutableRef, CompileResult]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Session:
    """One session's IPUs (made by :meth:`ipupod.Client.attach` and
    :meth:`ipupod.Client.session`). Use it as a context manager to release the IPUs at the end::

        with client.attach(ipus=1) as session:
            session.load("mlp.ipx")
            outputs = session.infer({"x": x})

    Attributes:
        id: the session id ("s1-3").
        ipus: the granted IPU ids (auto-round extras included).
        info: the ``SessionInfo`` at the grant (or when the handle was made).
        program: the ``LoadedProgram`` of the last :meth:`load` (None before; fetched with
            GetLoaded on first use for a session loaded elsewhere).
    """

    def __init__(self, client: Caller, info: pod_pb2.SessionInfo,
                 stream: Optional[AttachStream] = None) -> None:
        self._calls = client.calls  # the client's channel, identity and deadlines
        self._stream = stream
        self.info = info
        self.id: str = info.session
        self.ipus = list(info.ipus)
        self._program: Optional[execution_pb2.LoadedProgram] = None
        self._sha256: Optional[str] = None
        # The loaded program's outputs are over RunInline's bound: run() takes the stream.
        self._stream_runs = False

    def __repr__(self) -> str:
        held = "held by this client" if self._stream is not None else "held elsewhere"
        return f"<ipupod.Session {self.id} IPUs {self.ipus} ({held})>"

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def release(self) -> None:
        """Ends a session this client attached: Detach (so the IPUs are free when this
        returns), then closes the stream. Idempotent; does nothing for a session held
        elsewhere (use :meth:`ipupod.Client.detach` to end someone's session as admin)."""
        if self._stream is not None:
            self._stream.release(self._calls.detach)

    @property
    def owned(self) -> bool:
        """True when this client holds the session's attach stream."""
        return self._stream is not None

    @property
    def ended(self) -> bool:
        """True once this client's attach stream has ended (see :attr:`end_error`)."""
        return self._stream is not None and self._stream.ended

    @property
    def end_error(self) -> Optional[errors.Error]:
        """Why the attach stream ended (ABORTED: detached elsewhere; UNAVAILABLE: connection
        lost; CANCELLED: released here), or None while it lives."""
        return self._stream.end_error if self._stream is not None else None

    @property
    def preempted(self) -> Optional[pod_pb2.Preemption]:
        """The server's preemption notice (a preemptible QoS whose IPUs a higher class needs:
        release before ``deadline_unix_ms``), or None."""
        return self._stream.preempted if self._stream is not None else None

    def refresh(self) -> pod_pb2.SessionInfo:
        """GetSession: the session's state now (raises its device error if it has one)."""
        self.info = self._calls.get_session(self.id)
        return self.info

    def reset(self) -> pod_pb2.ResetResponse:
        """ResetSession: resets the session's IPUs as one device (clears IPU_RESET, LINK_RESET
        and PARTITION_RESET); load again afterwards."""
        return self._calls.reset_session(self.id)

    # ------------------------------------------------------------------ executables

    def load(self, executable: Executable) -> execution_pb2.LoadedProgram:
        """Loads an executable on the session's IPUs, uploading it first unless the server has
        it. ``executable``: an ``.ipx`` path, its bytes, an ``ExecutableRef``, a
        ``CompileResult`` (``Client.compile``: the server holds it) or its sha256.
        Returns the ``LoadedProgram`` (inputs, outputs, weights, run shape, training info)."""
        sha256 = self._executable_sha256(executable)
        request = execution_pb2.LoadRequest(session=self.id, sha256=sha256)
        self._program = self._calls.unary(self._calls.execution.Load, request,
                                          "ExecutionService.Load")
        self._sha256 = sha256
        self._stream_runs = False
        return self._program

    def _executable_sha256(self, executable: Executable) -> str:
        if isinstance(executable, (execution_pb2.ExecutableRef, CompileResult)):
            return executable.sha256
        if isinstance(executable, str) and _SHA256.match(executable) and not os.path.exists(
                executable):
            return executable
        return self._calls.upload_executable(executable).sha256

    def load_again(self, timeout: float = runs.RESET_WAIT_SECONDS) -> execution_pb2.LoadedProgram:
        """Loads the last loaded executable again (after a reset), retrying while the IPUs are
        still resetting (UNAVAILABLE) for up to ``timeout`` seconds."""
        if self._sha256 is None:
            raise errors.local_error("nothing was loaded through this handle; call load() first",
                                     grpc.StatusCode.FAILED_PRECONDITION, "Session.load_again")
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.load(self._sha256)
            except errors.Error as error:
                if error.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                    raise
            time.sleep(runs.POLL_SECONDS)

    @property
    def program(self) -> execution_pb2.LoadedProgram:
        """The loaded program (GetLoaded when this handle has not loaded one)."""
        if self._program is None:
            self._program = self.get_loaded()
        return self._program

    def get_loaded(self) -> execution_pb2.LoadedProgram:
        """GetLoaded: what is loaded on the session now (FAILED_PRECONDITION if nothing)."""
        request = execution_pb2.GetLoadedRequest(session=self.id)
        return self._calls.unary(self._calls.execution.GetLoaded, request,
                                 "ExecutionService.GetLoaded")

    # ------------------------------------------------------------------ weights

    def write_weights(self, weights: Mapping[str, Any]) -> execution_pb2.WriteWeightsResponse:
        """Writes weights by ONNX initializer name (numpy arrays or torch tensors), all or
        nothing; a checkpoint from :meth:`read_checkpoint` restores the training state."""
        arrays = tensors.to_arrays(weights, "Session.write_weights")
        requests = self._tensor_requests(arrays, execution_pb2.WriteWeightsRequest)
        return self._calls.stream_unary(self._calls.execution.WriteWeights, requests,
                                        "ExecutionService.WriteWeights")

    def read_weights(self, names: Optional[Iterable[str]] = None, *,
                     as_torch: bool = False) -> Dict[str, Any]:
        """The weights (all, or ``names``) as numpy arrays, or torch tensors with
        ``as_torch=True``."""
        request = execution_pb2.ReadWeightsRequest(session=self.id, names=list(names or ()))
        arrays = self._read_tensors(request)
        return tensors.as_torch(arrays) if as_torch else arrays

    def read_checkpoint(self) -> Dict[str, np.ndarray]:
        """Training: the whole state (weights, buffers, ``optimizer/<weight>/<slot>``,
        ``optimizer/step``, ``optimizer_attr/<name>``); write_weights() of it resumes
        exactly, here or in another session."""
        request = execution_pb2.ReadWeightsRequest(session=self.id, checkpoint=True)
        return self._read_tensors(request)

    def _tensor_requests(self, arrays: tensors.Arrays, message: Any):
        yield message(session=self.id)
        yield from tensors.encode(arrays, lambda h: message(header=h),
                                  lambda d: message(data=execution_pb2.TensorData(data=d)))

    def _read_tensors(self, request: execution_pb2.ReadWeightsRequest) -> tensors.Arrays:
        location = f"ExecutionService.ReadWeights at {self._calls.server}"
        assembler = tensors.TensorAssembler("weights", location)
        for part in self._calls.stream_out(self._calls.execution.ReadWeights, request,
                                           "ExecutionService.ReadWeights"):
            if part.HasField("header"):
                assembler.add_header(part.header)
            else:
                assembler.add_data(part.data.data)
        return assembler.finish()

    def set_optimizer(self, variables: Optional[Mapping[str, float]] = None,
                      **kwargs: float) -> execution_pb2.OptimizerInfo:
        """Training: changes optimizer variables for later runs, e.g. ``set_optimizer(lr=1e-3)``
        (all or nothing); param group i's as ``set_optimizer({"group/1/lr": 1e-4})``.
        FAILED_PRECONDITION for a constant attribute: recompile with it in ``--opt`` (or the
        group's ``--opt-group``) to make it a variable."""
        values = dict(variables or {}, **kwargs)
        request = execution_pb2.SetOptimizerRequest(
            session=self.id, variables={k: float(v) for k, v in values.items()})
        return self._calls.unary(self._calls.execution.SetOptimizer, request,
                                 "ExecutionService.SetOptimizer")

    # ------------------------------------------------------------------ runs

    def run(self, inputs: Mapping[str, Any]) -> runs.RunResult:
        """One step: exactly samples_per_step rows of every input (dim 0). A training program
        makes device_iterations weight updates; ``result.losses`` has one loss per update.

        A step whose inputs hold at most 1 MiB goes as one ``RunInline`` call (one round
        trip, no stream); larger ones, a program whose outputs are over 1 MiB, and servers
        without ``RunInline`` take the ``Run`` stream. The results are the same."""
        arrays = tensors.to_arrays(inputs, "Session.run")
        if (not self._stream_runs and self._calls.inline_steps
                and sum(a.nbytes for a in arrays.values()) <= tensors.INLINE_BYTES_MAX):
            try:
                return self._run_inline(arrays)
            except errors.Error as error:  # refusals before anything ran: take the stream
                if error.code == grpc.StatusCode.OUT_OF_RANGE:
                    self._stream_runs = True
                elif error.code == grpc.StatusCode.UNIMPLEMENTED:
                    self._calls.inline_steps = False
                else:
                    raise
        return self._run_stream(arrays)

    def run_inline(self, inputs: Mapping[str, Any]) -> runs.RunResult:
        """One step through ``RunInline`` only: OUT_OF_RANGE (nothing run) when the inputs or
        the program's outputs hold more than 1 MiB; :meth:`run` chooses for you."""
        return self._run_inline(tensors.to_arrays(inputs, "Session.run_inline"))

    def _run_inline(self, arrays: tensors.Arrays) -> runs.RunResult:
        request = tensors.inline_request(self.id, arrays)
        response = self._calls.unary(self._calls.run_inline_encoded, request,
                                     "ExecutionService.RunInline",
                                     timeout=self._calls.stream_timeout)
        location = f"ExecutionService.RunInline at {self._calls.server}"
        if not response.HasField("stats"):
            raise errors.malformed_stream("outputs", "the run ended without its stats", location)
        return runs.RunResult(outputs=tensors.decode_inline(response.outputs, "outputs", location),
                              stats=response.stats)

    def _run_stream(self, arrays: tensors.Arrays) -> runs.RunResult:
        requests = self._tensor_requests(arrays, execution_pb2.RunRequest)
        location = f"ExecutionService.Run at {self._calls.server}"
        assembler = tensors.TensorAssembler("outputs", location)
        stats = None
        for part in self._calls.stream_stream(self._calls.execution.Run, requests,
                                              "ExecutionService.Run"):
            which = part.WhichOneof("part")
            if which == "stats":
                stats = part.stats
            elif which == "header":
                assembler.add_header(part.header)
            elif which == "data":
                assembler.add_data(part.data.data)
        if stats is None:
            raise errors.malformed_stream("outputs", "the run ended without its stats", location)
        return runs.RunResult(outputs=assembler.finish(), stats=stats)

    def infer(self, inputs: Mapping[str, Any],
              on_step: Optional[Callable[[runs.RunProgress], None]] = None
              ) -> Dict[str, np.ndarray]:
        """Runs a whole data set: checks ``inputs`` against the loaded program (names, dtypes,
        per-sample shapes, a multiple of one step's samples), runs every step and returns the
        outputs concatenated along dim 0, keyed by ONNX output name, as ``ipupod run`` writes
        them. ``on_step`` gets a :class:`ipupod.RunProgress` after each step."""
        return runs.infer(self, inputs, on_step)

    def train(self, inputs: Mapping[str, Any], *, epochs: Optional[int] = None,
              steps: Optional[int] = None, lr: Optional[float] = None,
              checkpoint_every: int = 0, recover: bool = False, max_recoveries: int = 3,
              resume: Optional[Mapping[str, Any]] = None,
              on_run: Optional[Callable[[runs.RunProgress], None]] = None,
              keep_outputs: bool = False) -> runs.TrainResult:
        """Trains the loaded training program on a data set, as ``ipupod run --train``.

        Args:
            inputs: the whole data set by input name; each run takes the next step's samples,
                wrapping around.
            epochs: passes over ``inputs``; or ``steps``: weight updates (a multiple of
                device_iterations). Exactly one.
            lr: sets the learning rate first (``set_optimizer(lr=...)``).
            checkpoint_every: take a host copy of the training state every N runs (and at
                the end); ``recover`` alone takes one after every run.
            recover: survive recoverable faults: reset (a FULL_RESET waits up to 10 minutes
                for an admin's ``ipupod pod reset``), load again, write the last host copy
                back and repeat the runs since it; at most ``max_recoveries`` times.
            resume: a checkpoint (:meth:`read_checkpoint`) written first; training goes on at
                its data position.
            on_run: called with a :class:`ipupod.RunProgress` after each run.
            keep_outputs: also return every run's outputs, concatenated.

        Returns a :class:`ipupod.TrainResult` (losses of every update, recoveries, the last
        host copy). Raises the fault when it cannot recover.
        """
        return runs.train(self, inputs, epochs=epochs, steps=steps, lr=lr,
                          checkpoint_every=checkpoint_every, recover=recover,
                          max_recoveries=max_recoveries, resume=resume, on_run=on_run,
                          keep_outputs=keep_outputs)
