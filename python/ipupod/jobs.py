"""Batch jobs (JobService, proto/ipupod/v1/jobs.proto): work the server owns.

The executable, inputs and weights go into the server's content-addressed blob store once
(:meth:`JobsMixin.put_blob`: hashed here, by ipupod.sources, StatBlob, PutBlob only when the
server lacks the bytes); :meth:`JobsMixin.submit` names them by hash. A job is PENDING,
RUNNING, then COMPLETED, FAILED, CANCELLED or TIMEOUT whether or not this client stays;
:meth:`JobsMixin.wait_job` follows its events (riding out a server restart, as ``ipupod job
wait`` does) and :meth:`JobsMixin.fetch_results` downloads its results, resumably and checked
against their SHA-256.
"""

from __future__ import annotations

import enum
import hashlib
import io
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import grpc
import numpy as np

from ipupod import errors, tensors
from ipupod._proto import jobs_pb2
from ipupod.calls import Calls, seconds_of
from ipupod.sources import Blob, BlobSource, ipx_content_hash

#: Job states by name: ``JobState(job.state).name == "COMPLETED"``.
JobState = enum.IntEnum("JobState", {v.name: v.number for v in jobs_pb2.JobState.DESCRIPTOR.values})
#: The states a job ends in.
FINISHED_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                             JobState.TIMEOUT})

# How long a follower keeps reconnecting to a server that went away (a restart takes
# seconds), and the pause between attempts (client/cli/jobs.cc).
_RECONNECT_WINDOW_SECONDS = 120.0
_RECONNECT_PAUSE_SECONDS = 1.0
_FILE_NAME_BYTES_MAX = 255

def _job_name(executable: Any) -> str:
    if isinstance(executable, (bytes, bytearray, memoryview)):
        return ""
    name = os.path.basename(os.fspath(executable))[:64]
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in name)


def _sweep_text(sweep: Union[None, str, Mapping[str, Sequence[float]]]) -> str:
    if sweep is None or isinstance(sweep, str):
        return (sweep or "").strip()
    if len(sweep) != 1:
        raise errors.local_error("sweep= takes one optimizer variable, e.g. {'lr': [0.1, 0.01]}",
                                 grpc.StatusCode.INVALID_ARGUMENT, "Client.submit")
    (name, values), = sweep.items()
    return f"{name}=" + ",".join(repr(float(v)) for v in values)


class JobsMixin:
    """The JobService half of :class:`ipupod.Client` (see the module doc), made through the
    client's :class:`ipupod.calls.Calls`."""

    _calls: Calls

    # ------------------------------------------------------------------ blobs

    def stat_blob(self, sha256: str) -> jobs_pb2.BlobRef:
        """The server's record of a blob; NOT_FOUND when it does not hold those bytes."""
        return self._calls.stat_blob(sha256)

    def put_blob(self, blob: Blob, what: str = "file") -> jobs_pb2.BlobRef:
        """Puts bytes into the blob store unless the server holds them (then
        ``already_stored`` is set). ``blob``: a file path, bytes, or a mapping of arrays
        (stored as a deterministic .npz). ``what`` names it in messages."""
        return self._calls.put_blob(BlobSource(blob, what, "Client.put_blob"))

    # ------------------------------------------------------------------ submit

    def submit(self, executable: Blob, inputs: Blob, *, weights: Optional[Blob] = None,
               outputs: Optional[Sequence[str]] = None, train: bool = False,
               epochs: int = 0, steps: int = 0, lr: Optional[float] = None,
               optimizer: Optional[Mapping[str, float]] = None, checkpoint_every: int = 0,
               ipus: int = 0, partition: str = "", auto_round: bool = False,
               time_limit: Any = None, after: str = "", name: Optional[str] = None,
               sweep: Union[None, str, Mapping[str, Sequence[float]]] = None,
               account: str = "", qos: str = "",
               **spec_fields: Any) -> List[jobs_pb2.Job]:
        """Submits a batch job (as ``ipupod submit``) and returns its records at once (one
        per value of a ``sweep``).

        Args:
            executable: the ``.ipx`` (path or bytes).
            inputs: the data set: an ``.npz``/``.safetensors`` path, bytes of an .npz, or a
                mapping of arrays by input name.
            weights: initial weights (path: .npz, .safetensors, .onnx; or a mapping).
            outputs: inference: the outputs to keep (default all).
            train, epochs, steps, lr, optimizer, checkpoint_every: training: exactly one of
                epochs (passes) or steps (weight updates), optimizer variables, host copies
                every N runs.
            ipus, partition, auto_round: where (0 IPUs = the executable's own count).
            time_limit: seconds or timedelta (default: the server's).
            after: a job id; start once it has COMPLETED.
            name: the job's name (default: the executable's file name).
            sweep: ``"lr=0.1,0.01"`` or ``{"lr": [0.1, 0.01]}``: one job per value.
            account, qos: fair sharing (docs/scheduling.md): the account charged (default:
                your default account) and the QoS (default ``normal``; ``scavenger`` jobs
                may be preempted, and resume from their last checkpoint).
            spec_fields: other ``JobSpec`` fields by name (e.g. fields a newer server added).
        """
        location = "Client.submit"
        spec = jobs_pb2.JobSpec(
            name=_job_name(executable) if name is None else name, train=train, epochs=epochs,
            steps=steps, checkpoint_every=checkpoint_every, num_ipus=ipus,
            partition=partition, auto_round=auto_round, after=after,
            outputs=list(outputs or ()), account=account, qos=qos,
            time_limit_seconds=int(seconds_of(time_limit, "time_limit", location)))
        variables = dict(optimizer or {}, **({"lr": lr} if lr is not None else {}))
        for key, value in variables.items():
            spec.optimizer[key] = float(value)
        self._set_spec_fields(spec, spec_fields, location)
        self._check_submit(spec, location)
        ipx = BlobSource(executable, "executable", location)
        ipx_content_hash(ipx.head(64), "the executable", location)  # an .ipx, before uploading
        data = BlobSource(inputs, "inputs file", location)
        self._check_format(data.format, "inputs", ("npz", "safetensors", "npy"), location)
        if weights is not None:
            initial = BlobSource(weights, "weights file", location)
            self._check_format(initial.format, "weights", ("npz", "safetensors", "npy", "onnx"),
                               location)
        spec.executable_sha256 = self._calls.put_blob(ipx).sha256
        spec.inputs.sha256, spec.inputs.format = self._calls.put_blob(data).sha256, data.format
        if weights is not None:
            spec.weights.sha256 = self._calls.put_blob(initial).sha256
            spec.weights.format = initial.format
        request = jobs_pb2.SubmitJobRequest(spec=spec, sweep=_sweep_text(sweep))
        return list(self._calls.unary(self._calls.jobs.SubmitJob, request,
                                      "JobService.SubmitJob").jobs)

    @staticmethod
    def _set_spec_fields(spec: jobs_pb2.JobSpec, fields: Mapping[str, Any], location: str) -> None:
        known = {f.name for f in spec.DESCRIPTOR.fields}
        for key, value in fields.items():
            if key not in known:
                raise errors.local_error(
                    f"submit() has no argument '{key}' and JobSpec no such field (fields: "
                    f"{', '.join(sorted(known))})", grpc.StatusCode.INVALID_ARGUMENT, location)
            setattr(spec, key, value)

    @staticmethod
    def _check_submit(spec: jobs_pb2.JobSpec, location: str) -> None:
        if not spec.train and (spec.epochs or spec.steps or spec.optimizer or
                               spec.checkpoint_every):
            raise errors.local_error("epochs, steps, lr, optimizer and checkpoint_every are for "
                                     "training: pass train=True", grpc.StatusCode.INVALID_ARGUMENT,
                                     location)
        if spec.train and (spec.epochs > 0) == (spec.steps > 0):
            raise errors.local_error("train=True needs how long to train: epochs=E (passes over "
                                     "the inputs) or steps=K (weight updates)",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)

    @staticmethod
    def _check_format(format_name: str, what: str, accepted: Sequence[str], location: str) -> None:
        if format_name not in accepted:
            raise errors.local_error(f"cannot tell the format of the {what} file from its name; "
                                     f"use {', '.join('.' + a for a in accepted)}",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)

    # ------------------------------------------------------------------ records

    def list_jobs(self, all: bool = False, user: str = "",  # noqa: A002 - the CLI's --all
                  states: Optional[Sequence[Union[int, str]]] = None) -> List[jobs_pb2.Job]:
        """Jobs like ``ipupod jobs``: PENDING and RUNNING ones (``all=True``: finished ones
        too), optionally only ``user``'s or in ``states`` (names or JobState values; naming a
        finished state lists those too)."""
        wanted = [JobState[s.upper()] if isinstance(s, str) else JobState(s) for s in states or ()]
        request = jobs_pb2.ListJobsRequest(all=all or any(s in FINISHED_STATES for s in wanted),
                                           user=user, states=[int(s) for s in wanted])
        return list(self._calls.unary(self._calls.jobs.ListJobs, request,
                                      "JobService.ListJobs").jobs)

    def _on_job(self, method: str, job_id: str) -> Any:
        return self._calls.unary(getattr(self._calls.jobs, method),
                                 jobs_pb2.JobRequest(id=job_id), f"JobService.{method}")

    def get_job(self, job_id: str) -> jobs_pb2.Job:
        """The job's record (spec, times, progress, error, results for its owner)."""
        return self._on_job("GetJob", job_id)

    def cancel_job(self, job_id: str) -> jobs_pb2.Job:
        """PENDING or RUNNING -> CANCELLED (a running job stops after its current step)."""
        return self._on_job("CancelJob", job_id)

    def hold_job(self, job_id: str) -> jobs_pb2.Job:
        """Keeps a PENDING job from starting until :meth:`release_job`."""
        return self._on_job("HoldJob", job_id)

    def release_job(self, job_id: str) -> jobs_pb2.Job:
        """Lets a held job start again (Held -> PENDING)."""
        return self._on_job("ReleaseJob", job_id)

    def delete_job(self, job_id: str) -> int:
        """Removes a finished job's record and results; returns the bytes freed."""
        return self._on_job("DeleteJob", job_id).freed_bytes

    # ------------------------------------------------------------------ events

    def job_events(self, job_id: str, from_event: int = 0, follow: bool = False,
                   timeout: Optional[float] = None) -> Iterator[jobs_pb2.JobEvent]:
        """The job's events (state changes, runs with their losses, recoveries, ...) from
        ``from_event``; with ``follow`` until the job has finished, or until the server ends
        the watch (its ``jobs_watch_max_seconds``): follow again from the next event's seq, as
        :meth:`wait_job` does. ``timeout``: the stream's deadline (default: none when
        following, else stream_timeout)."""
        request = jobs_pb2.WatchJobRequest(id=job_id, from_event=from_event, follow=follow)
        deadline = timeout if timeout is not None else (
            None if follow else self._calls.stream_timeout)
        return self._calls.stream_out(self._calls.jobs.WatchJob, request, "JobService.WatchJob",
                                      deadline)

    def wait_job(self, job_id: str, timeout: Optional[float] = None,
                 on_event: Optional[Callable[[jobs_pb2.JobEvent], None]] = None) -> jobs_pb2.Job:
        """Follows a job until it has finished and returns its record (check ``.state``:
        ``JobState.COMPLETED``...). ``on_event`` sees each event once. A server restart is
        ridden out (reconnecting for up to two minutes). After ``timeout`` seconds raises
        DEADLINE_EXCEEDED (the job goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        next_seq = [0]
        while True:
            job = self.get_job(job_id)
            if job.state in FINISHED_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.Error(f"job {job_id} is still {JobState(job.state).name} after "
                                   f"{timeout:g} s; it goes on (wait again, or cancel it)",
                                   code=grpc.StatusCode.DEADLINE_EXCEEDED,
                                   type="client.application", location="Client.wait_job")
            self._follow(job_id, deadline, next_seq, on_event)
            # The stream ended: the job finished, the wait ran out, or the server is going
            # away; GetJob tells. The pause keeps an early-ending server from a hot loop.
            job = self.get_job(job_id)
            if job.state in FINISHED_STATES:
                return job
            time.sleep(_RECONNECT_PAUSE_SECONDS if deadline is None
                       else max(0.0, min(_RECONNECT_PAUSE_SECONDS, deadline - time.monotonic())))

    def _follow(self, job_id: str, deadline: Optional[float], next_seq: List[int],
                on_event: Optional[Callable[[jobs_pb2.JobEvent], None]]) -> None:
        failing_since = None
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                for event in self.job_events(job_id, next_seq[0], follow=True, timeout=left):
                    failing_since = None
                    if event.seq < next_seq[0]:
                        continue  # sent again after a reconnect
                    next_seq[0] = event.seq + 1
                    if on_event is not None:
                        on_event(event)
                return
            except errors.Error as error:
                if error.code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                    return
                if error.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > _RECONNECT_WINDOW_SECONDS:
                    raise
                time.sleep(_RECONNECT_PAUSE_SECONDS)

    # ------------------------------------------------------------------ results

    def fetch_results(self, job_id: str, directory: Union[str, "os.PathLike[str]"],
                      on_progress: Optional[Callable[[str, int, int], None]] = None
                      ) -> Dict[str, str]:
        """Downloads every result of a finished job into ``directory`` (made if missing):
        outputs.npz, or weights.npz, model.onnx and checkpoint.npz when training, and
        report.json. Each is checked against its SHA-256; a file already there with the right
        hash is kept; a dropped download resumes from ``NAME.part`` on the next call.
        ``on_progress(name, done_bytes, total_bytes)``. Returns name -> path."""
        job = self.get_job(job_id)
        _check_has_results(job)
        os.makedirs(directory, exist_ok=True)
        paths = {}
        for result in job.results:
            _check_result_name(result.name, job.id)
            path = os.path.join(os.fspath(directory), result.name)
            if not (os.path.isfile(path) and _file_sha256(path) == result.sha256):
                self._fetch_to(job.id, result, path, on_progress)
            paths[result.name] = path
        return paths

    def job_tensors(self, job_id: str, name: str = "outputs.npz") -> Dict[str, np.ndarray]:
        """A finished job's .npz result (``outputs.npz``, ``weights.npz``,
        ``checkpoint.npz``) read into memory as named arrays, checked against its SHA-256."""
        job = self.get_job(job_id)
        _check_has_results(job)
        result = next((r for r in job.results if r.name == name), None)
        if result is None:
            raise errors.local_error(
                f"job {job_id} has no result '{name}' (it has: "
                f"{', '.join(r.name for r in job.results)})", grpc.StatusCode.NOT_FOUND,
                "Client.job_tensors")
        data = bytearray()
        for chunk in self._result_chunks(job.id, result, 0):
            data += chunk
        _check_digest(hashlib.sha256(data).hexdigest(), len(data), result, job.id, None)
        with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}

    def _result_chunks(self, job_id: str, result: jobs_pb2.ResultFile,
                       offset: int) -> Iterator[bytes]:
        request = jobs_pb2.FetchResultRequest(id=job_id, name=result.name, offset=offset)
        position = offset
        for chunk in self._calls.stream_out(self._calls.jobs.FetchResult, request,
                                            "JobService.FetchResult"):
            if chunk.offset != position or len(chunk.data) > result.size_bytes - position:
                raise errors.Error(
                    f"ipupodd sent bytes {chunk.offset}..{chunk.offset + len(chunk.data)} of "
                    f"result {result.name} ({result.size_bytes} bytes) where byte {position} was "
                    f"due; please report this as an ipupodd bug", code=grpc.StatusCode.INTERNAL,
                    location="JobService.FetchResult")
            position += len(chunk.data)
            yield chunk.data

    def _fetch_to(self, job_id: str, result: jobs_pb2.ResultFile, path: str,
                  on_progress: Optional[Callable[[str, int, int], None]]) -> None:
        part = path + ".part"
        with open(part, "ab") as file:
            if file.tell() > result.size_bytes:  # another version of the result: start again
                file.truncate(0)
            done = file.tell()
            if done < result.size_bytes:
                for data in self._result_chunks(job_id, result, done):
                    file.write(data)
                    done += len(data)
                    if on_progress is not None:
                        on_progress(result.name, done, result.size_bytes)
            file.flush()
            os.fsync(file.fileno())
        _check_digest(_file_sha256(part), os.path.getsize(part), result, job_id, part)
        os.replace(part, path)


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while piece := file.read(tensors.CHUNK_BYTES):
            digest.update(piece)
    return digest.hexdigest()


def _check_digest(sha256: str, size: int, result: jobs_pb2.ResultFile, job_id: str,
                  part: Optional[str]) -> None:
    if size != result.size_bytes:
        kept = f"; the bytes so far are kept in '{part}': fetch again to resume" if part else ""
        raise errors.Error(f"ipupodd ended result {result.name} of job {job_id} at byte {size} of "
                           f"{result.size_bytes}{kept}", code=grpc.StatusCode.UNAVAILABLE,
                           location="JobService.FetchResult")
    if sha256 != result.sha256:
        if part:
            os.unlink(part)
        raise errors.Error(f"result {result.name} of job {job_id} arrived corrupted: its SHA-256 "
                           f"is {sha256} but the job record says {result.sha256}; fetch again",
                           code=grpc.StatusCode.DATA_LOSS, location="JobService.FetchResult")


def _check_has_results(job: jobs_pb2.Job) -> None:
    location = "Client.fetch_results"
    if job.details_hidden:  # the server's own answer to another user's fetch
        raise errors.local_error(f"job {job.id} belongs to {job.user}: only its owner or an admin "
                                 f"may see its details or change it",
                                 grpc.StatusCode.PERMISSION_DENIED, location)
    if job.results_purged:
        raise errors.local_error(f"the results of job {job.id} were removed by the server's "
                                 f"retention period", grpc.StatusCode.FAILED_PRECONDITION, location)
    if job.results:
        return
    state = JobState(job.state).name
    if job.state not in FINISHED_STATES:
        raise errors.local_error(f"job {job.id} is {state} and has no results yet; wait for it "
                                 f"with wait_job(), then fetch",
                                 grpc.StatusCode.FAILED_PRECONDITION, location)
    raise errors.local_error(f"job {job.id} ended {state} without results ({job.reason})",
                             grpc.StatusCode.FAILED_PRECONDITION, location)


def _check_result_name(name: str, job_id: str) -> None:
    if (not name or name in (".", "..") or len(name.encode()) > _FILE_NAME_BYTES_MAX
            or "/" in name or "\0" in name):
        raise errors.Error(f"ipupodd named a result of job {job_id} {name[:80]!r}, which is not a "
                           f"plain file name; nothing was written for it (please report this as "
                           f"a bug)", code=grpc.StatusCode.INTERNAL,
                           location="Client.fetch_results")
