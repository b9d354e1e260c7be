"""The attach stream: a session lives exactly as long as its stream (docs/design.md).

:class:`AttachStream` opens ``SessionService.Attach`` and reads it on a background thread
("ipupod-attach", a daemon), so the session stays held while the caller works: queue positions
are kept (the last 64; only the latest matters) for :meth:`AttachStream.wait_for_grant`, which
hands them to the caller's callback on the caller's thread; the grant is kept; a preemption
notice is kept and handed to an optional callback on the reader thread; heartbeats only prove
the session alive. When the stream ends the reason is kept as an :class:`ipupod.Error`, as the
C++ client's AttachCall does: ABORTED when the session was detached elsewhere or the server
cancelled it, UNAVAILABLE "connection to ipupodd lost" when the connection broke, the server's
own status otherwise, CANCELLED when this client released it.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Optional

import grpc

from ipupod import errors, transport
from ipupod._proto import pod_pb2

_POSITIONS_MAX = 64
# How long release() and close waits for the reader thread after cancelling; the
# cancellation is local, so this only guards against a stuck runtime.
_READER_STOP_SECONDS = 5.0
# The longest single wait on the condition, so Ctrl-C is seen promptly.
_WAIT_SLICE_SECONDS = 0.25


class AttachStream:
    """One Attach stream and its reader thread. Thread-safe; see the module doc."""

    def __init__(self, stub: Any, request: pod_pb2.AttachRequest,
                 connection: transport.Connection,
                 on_preempted: Optional[Callable[[pod_pb2.Preemption], None]] = None) -> None:
        self._server = connection.server
        self._connection = connection  # how the channel is secured, for a handshake's message
        self._on_preempted = on_preempted
        self._cv = threading.Condition()
        self._positions: collections.deque = collections.deque(maxlen=_POSITIONS_MAX)
        self._granted: Optional[pod_pb2.SessionInfo] = None
        self._preempted: Optional[pod_pb2.Preemption] = None
        self._last_ticket: Optional[str] = None
        self._cancelled = False
        self._ended = False
        self._end_error: Optional[errors.Error] = None
        # No deadline: the stream is the session and lasts as long as it is held.
        self._call = stub.Attach(request, metadata=connection.metadata)
        self._thread = threading.Thread(target=self._read, name="ipupod-attach", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ reader thread

    def _read(self) -> None:
        failure: Optional[grpc.RpcError] = None
        try:
            for event in self._call:
                self._on_event(event)
        except grpc.RpcError as error:
            failure = error
        with self._cv:
            self._end_error = self._end_status(failure)
            self._ended = True
            self._cv.notify_all()

    def _on_event(self, event: pod_pb2.AttachEvent) -> None:
        which = event.WhichOneof("event")
        notice = None
        with self._cv:
            if which == "queued":
                self._last_ticket = event.queued.ticket
                self._positions.append(event.queued)
            elif which == "granted" and self._granted is None:
                self._granted = event.granted
            elif which == "preempted":
                self._preempted = notice = event.preempted
            else:
                return  # heartbeats only prove the session alive
            self._cv.notify_all()
        if notice is not None and self._on_preempted is not None:
            self._on_preempted(notice)

    def _end_status(self, failure: Optional[grpc.RpcError]) -> errors.Error:
        location = f"SessionService.Attach at {self._server}"
        if self._cancelled:
            what = (f"session {self._granted.session} released by this client" if self._granted
                    else "attach cancelled; the request left the queue")
            return errors.Error(what, code=grpc.StatusCode.CANCELLED, type="client.application",
                                location=location)
        if self._granted is not None:
            return self._end_after_grant(failure, location)
        return self._end_before_grant(failure, location)

    def _end_after_grant(self, failure: Optional[grpc.RpcError], location: str) -> errors.Error:
        session = self._granted.session
        if failure is None:
            return errors.Error(f"session {session} ended: ipupodd closed its stream",
                                code=grpc.StatusCode.ABORTED, type="ipupodd.application",
                                location=location)
        code, details, trailers = _status_of(failure)
        if errors.is_transport_failure(code, details, trailers):
            return errors.Error(
                f"connection to ipupodd lost; session {session} has ended and its IPUs were "
                f"released (sessions do not survive a server restart); attach again when the "
                f"server is back", code=grpc.StatusCode.UNAVAILABLE, type="transport.unavailable",
                location=location, details=details)
        if code == grpc.StatusCode.CANCELLED:
            return errors.Error(
                f"session {session} ended: ipupodd cancelled its stream (the session lease may "
                f"have run out)", code=grpc.StatusCode.ABORTED, type="ipupodd.application",
                location=location, details=details)
        return errors.from_status(code, details, trailers, location=location)

    def _end_before_grant(self, failure: Optional[grpc.RpcError], location: str) -> errors.Error:
        if failure is None:
            return errors.Error("ipupodd closed the attach stream without a grant; try again",
                                code=grpc.StatusCode.UNAVAILABLE, type="ipupodd.application",
                                location=location)
        code, details, trailers = _status_of(failure)
        if code == grpc.StatusCode.CANCELLED:
            return errors.Error("ipupodd cancelled the attach request; try again",
                                code=grpc.StatusCode.ABORTED, type="ipupodd.application",
                                location=location, details=details)
        if errors.is_transport_failure(code, details, trailers):
            if self._last_ticket is not None:
                return errors.Error(
                    f"connection to ipupodd lost while waiting in the queue (ticket "
                    f"{self._last_ticket}); the request is gone: attach again when the server "
                    f"is back ({details})", code=grpc.StatusCode.UNAVAILABLE,
                    type="transport.unavailable", location=location, details=details)
            return errors.transport_failure(
                self._server, details, location, tls_ca=self._connection.tls_ca,
                client_certificate=self._connection.client_certificate)
        return errors.from_status(code, details, trailers, location=location)

    # ------------------------------------------------------------------ caller side

    def wait_for_grant(self, on_position: Optional[Callable[[pod_pb2.QueuePosition], None]],
                       timeout: Optional[float]) -> pod_pb2.SessionInfo:
        """Blocks until the grant; raises the stream's end (or DEADLINE_EXCEEDED after
        ``timeout`` seconds, None = no limit, leaving the queue). ``on_position`` runs on this
        thread for every queue position, in order. Ctrl-C cancels the request and re-raises.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                position, granted = self._next(deadline)
                if position is not None:
                    if on_position is not None:
                        on_position(position)
                    continue
                return granted
        except BaseException:
            self.cancel()
            raise

    def _next(self, deadline: Optional[float]) -> tuple:
        with self._cv:
            while not (self._positions or self._granted is not None or self._ended):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.Error(
                        f"ipupodd at {self._server} neither granted nor refused the attach in "
                        f"time; gave up and left the queue (pass a larger wait_timeout= or "
                        f"timeout= to wait longer)", code=grpc.StatusCode.DEADLINE_EXCEEDED,
                        type="client.application", location="Client.attach")
                self._cv.wait(_WAIT_SLICE_SECONDS if left is None
                              else min(left, _WAIT_SLICE_SECONDS))
            if self._positions:
                return self._positions.popleft(), None
            if self._granted is not None:
                return None, self._granted
            raise self._end_error

    def cancel(self) -> None:
        """Ends the stream (a waiting request leaves the queue, a session ends). Idempotent."""
        with self._cv:
            if self._ended:
                return
            self._cancelled = True
        self._call.cancel()

    def release(self, detach: Callable[[str], Any]) -> None:
        """Ends a granted session deterministically: ``detach(session)`` (best effort: the
        IPUs are free when it returns), then cancels the stream and joins the reader."""
        with self._cv:
            if not self._ended:
                self._cancelled = True
            session = self._granted.session if self._granted and not self._ended else None
        if session is not None:
            try:
                detach(session)
            except Exception:  # noqa: BLE001 - best effort (server gone, channel closed):
                pass  # cancelling the stream releases the IPUs too
        self._call.cancel()
        self._thread.join(_READER_STOP_SECONDS)

    @property
    def ended(self) -> bool:
        with self._cv:
            return self._ended

    @property
    def end_error(self) -> Optional[errors.Error]:
        with self._cv:
            return self._end_error

    @property
    def preempted(self) -> Optional[pod_pb2.Preemption]:
        with self._cv:
            return self._preempted

    def wait_for_end(self, timeout: float) -> Optional[errors.Error]:
        """The reason the stream ended, or None if it is still open after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(min(left, _WAIT_SLICE_SECONDS))
            return self._end_error


def _status_of(failure: grpc.RpcError) -> tuple:
    code = failure.code() if hasattr(failure, "code") else grpc.StatusCode.UNKNOWN
    details = (failure.details() if hasattr(failure, "details") else str(failure)) or ""
    try:
        trailers = failure.trailing_metadata()
    except Exception:
        trailers = None
    return code, details, trailers
