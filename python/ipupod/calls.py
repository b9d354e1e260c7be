"""The calls: every RPC of ipupod.v1 over one connection, with deadlines and ipupod errors.

:class:`Calls` is the package's internal interface to the server, below :class:`ipupod.Client`
and :class:`ipupod.Session` (docs/python.md, "The package's layers"). It holds the stubs of
every service and makes each call with the caller's identity and a deadline (``timeout`` for
unary calls, ``stream_timeout`` for uploads, weight transfers and runs), turning a failed
status into an :class:`ipupod.Error` (transport.Connection.error). The RPCs that more than one
part of the package makes (a session's state, detach and reset; the content-addressed uploads
of executables and blobs) are methods here, so Client, Session and the jobs and compile calls
share one implementation.

The argument checks the areas share (:func:`seconds_of`, :func:`uint`, :func:`unix_ms`) are
here too.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Iterable, Iterator, List, Optional, Protocol, Union

import grpc

from ipupod import errors, transport
from ipupod._proto import (accounting_pb2_grpc, audit_pb2_grpc, compile_pb2_grpc,
                           execution_pb2, execution_pb2_grpc, jobs_pb2, jobs_pb2_grpc, pod_pb2,
                           pod_pb2_grpc)
from ipupod.sources import BlobSource, IpxFile, IpxSource

#: A duration: seconds, or a timedelta.
Seconds = Union[int, float, datetime.timedelta]
#: A point in time: a datetime, or seconds since the epoch (None: unset).
Time = Union[None, int, float, datetime.datetime]
#: ``Calls.stream_out``'s default deadline: "the calls' stream_timeout" (None means none).
STREAM_TIMEOUT = object()


class Calls:
    """The stubs of every ipupod.v1 service on one :class:`transport.Connection`, and the
    calls through them (see the module doc). Thread-safe as gRPC's channel is.

    Attributes:
        connection: the channel, its metadata and its status mapping.
        timeout: the deadline of each unary call, in seconds.
        stream_timeout: the deadline of each upload, weight transfer and run.
        inline_steps: whether ``Session.run`` may send a small step as one RunInline call.
        pod, partitions, sessions, execution, jobs, compiler, accounting, audit: the stubs.
        run_inline_encoded: RunInline taking the request as bytes already serialized
            (tensors.inline_request).
    """

    def __init__(self, connection: transport.Connection, timeout: float,
                 stream_timeout: float) -> None:
        self.connection = connection
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.inline_steps = True
        channel = connection.channel
        self.pod = pod_pb2_grpc.PodServiceStub(channel)
        self.partitions = pod_pb2_grpc.PartitionServiceStub(channel)
        self.sessions = pod_pb2_grpc.SessionServiceStub(channel)
        self.execution = execution_pb2_grpc.ExecutionServiceStub(channel)
        self.run_inline_encoded = channel.unary_unary(
            "/ipupod.v1.ExecutionService/RunInline", request_serializer=None,
            response_deserializer=execution_pb2.RunInlineResponse.FromString)
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.compiler = compile_pb2_grpc.CompileServiceStub(channel)
        self.accounting = accounting_pb2_grpc.AccountingServiceStub(channel)
        self.audit = audit_pb2_grpc.AuditServiceStub(channel)

    @property
    def server(self) -> str:
        """The server's address, as the caller gave it."""
        return self.connection.server

    # ------------------------------------------------------------------ making calls

    def unary(self, stub_method: Callable, request: Any, method: str,
              timeout: Optional[float] = None) -> Any:
        """One unary call; ``timeout`` in seconds, default the calls' ``timeout``."""
        deadline = self.timeout if timeout is None else timeout
        try:
            return stub_method(request, timeout=deadline, metadata=self.connection.metadata)
        except grpc.RpcError as error:
            raise self.connection.error(error, method, deadline) from None

    def stream_unary(self, stub_method: Callable, requests: Iterable, method: str) -> Any:
        """A client stream of ``requests`` and its one response."""
        source = Requests(requests)
        try:
            return stub_method(source, timeout=self.stream_timeout,
                               metadata=self.connection.metadata)
        except grpc.RpcError as error:
            if source.error is not None:  # our own iterator failed: its error, not CANCELLED
                raise source.error from None
            raise self.connection.error(error, method, self.stream_timeout) from None

    def stream_out(self, stub_method: Callable, request: Any, method: str,
                   timeout: Any = STREAM_TIMEOUT) -> Iterator:
        """A server stream's messages; the call is cancelled if the consumer stops early.
        ``timeout``: seconds, None for no deadline, default ``stream_timeout``."""
        deadline = self.stream_timeout if timeout is STREAM_TIMEOUT else timeout
        call = stub_method(request, timeout=deadline, metadata=self.connection.metadata)
        try:
            yield from call
        except grpc.RpcError as error:
            raise self.connection.error(error, method, deadline) from None
        finally:
            call.cancel()

    def stream_stream(self, stub_method: Callable, requests: Iterable, method: str) -> Iterator:
        """A bidirectional stream: ``requests`` out, the responses in."""
        source = Requests(requests)
        call = stub_method(source, timeout=self.stream_timeout, metadata=self.connection.metadata)
        try:
            yield from call
        except grpc.RpcError as error:
            if source.error is not None:
                raise source.error from None
            raise self.connection.error(error, method, self.stream_timeout) from None
        finally:
            call.cancel()

    # ------------------------------------------------------------------ shared RPCs

    def get_session(self, session_id: str) -> pod_pb2.SessionInfo:
        """GetSession: a session's state; raises its device error when one of its IPUs
        faulted."""
        return self.unary(self.sessions.GetSession, pod_pb2.GetSessionRequest(session=session_id),
                          "SessionService.GetSession")

    def detach(self, session_id: str) -> List[int]:
        """Detach: ends a session; the IPUs released."""
        response = self.unary(self.sessions.Detach, pod_pb2.DetachRequest(session=session_id),
                              "SessionService.Detach")
        return list(response.released_ipus)

    def reset_session(self, session_id: str) -> pod_pb2.ResetResponse:
        """ResetSession: resets a session's IPUs as one device (up to PARTITION_RESET)."""
        return self.unary(self.sessions.ResetSession,
                          pod_pb2.ResetSessionRequest(session=session_id),
                          "SessionService.ResetSession")

    def stat_executable(self, sha256: str) -> execution_pb2.ExecutableRef:
        """StatExecutable: the server's record of an executable; NOT_FOUND without it."""
        return self.unary(self.execution.StatExecutable,
                          execution_pb2.StatExecutableRequest(sha256=sha256),
                          "ExecutionService.StatExecutable")

    def upload_executable(self, executable: IpxFile) -> execution_pb2.ExecutableRef:
        """Uploads an .ipx unless the server holds it (then ``cache_hit`` is set); checked as
        an .ipx before anything is sent."""
        source = IpxSource(executable)
        try:
            ref = self.stat_executable(source.sha256)
            ref.cache_hit = True
            return ref
        except errors.Error as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
        return self.stream_unary(self.execution.UploadExecutable, source.chunks(),
                                 "ExecutionService.UploadExecutable")

    def stat_blob(self, sha256: str) -> jobs_pb2.BlobRef:
        """StatBlob: the server's record of a blob; NOT_FOUND when it lacks those bytes."""
        return self.unary(self.jobs.StatBlob, jobs_pb2.StatBlobRequest(sha256=sha256),
                          "JobService.StatBlob")

    def put_blob(self, source: BlobSource) -> jobs_pb2.BlobRef:
        """PutBlob unless the server holds the bytes (then ``already_stored`` is set)."""
        try:
            ref = self.stat_blob(source.sha256)
            ref.already_stored = True
            return ref
        except errors.Error as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
        return self.stream_unary(self.jobs.PutBlob, source.chunks(), "JobService.PutBlob")


class Caller(Protocol):
    """What makes its RPCs through a :class:`Calls`: an :class:`ipupod.Client`, whose
    sessions (``ipupod.Session(client, info)``) share its calls."""

    @property
    def calls(self) -> Calls: ...


class Requests:
    """A request iterator that remembers the exception it raised (gRPC would only cancel)."""

    def __init__(self, requests: Iterable) -> None:
        self._iterator = iter(requests)
        self.error: Optional[BaseException] = None

    def __iter__(self) -> "Requests":
        return self

    def __next__(self) -> Any:
        try:
            return next(self._iterator)
        except StopIteration:
            raise
        except BaseException as error:
            self.error = error
            raise


# ---------------------------------------------------------------------- argument checks


def seconds_of(value: Optional[Seconds], what: str, location: str) -> float:
    """A duration given as seconds or a timedelta, checked (None = 0: none)."""
    if value is None:
        return 0.0
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if not isinstance(value, (int, float)) or value < 0 or value != value:
        raise errors.local_error(f"{what} must be a non-negative number of seconds or a "
                                 f"timedelta, not {value!r}", grpc.StatusCode.INVALID_ARGUMENT,
                                 location)
    return float(value)


def unix_ms(value: Time, what: str, location: str) -> int:
    """A time (a datetime, or seconds since the epoch) in Unix milliseconds; None = 0."""
    if value is None:
        return 0
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return int(value * 1000)
    raise errors.local_error(f"{what} must be a datetime or seconds since the epoch, not "
                             f"{value!r}", grpc.StatusCode.INVALID_ARGUMENT, location)


def uint(value: Any, what: str, location: str, minimum: int = 0) -> int:
    """An integer from ``minimum`` to 2**32 - 1 (a uint32 field), checked."""
    if isinstance(value, bool) or not isinstance(value, int) or not (
            minimum <= value < 2**32):
        raise errors.local_error(f"{what} must be an integer from {minimum} to {2**32 - 1}, not "
                                 f"{value!r}", grpc.StatusCode.INVALID_ARGUMENT, location)
    return value
