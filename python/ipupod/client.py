"""``ipupod.Client``: one gRPC channel to ipupodd and a method per operation of ipupod.v1.

Every call carries the caller's identity (``authorization: Bearer TOKEN`` when a token is set,
else ``x-ipupod-user: USER``, open mode), has a deadline (``timeout`` for unary calls,
``stream_timeout`` for uploads, weight transfers and runs) and turns a failed status into an
:class:`ipupod.Error` (client/client.h is the C++ counterpart; docs/python.md the guide).
The calls themselves are made by :class:`ipupod.calls.Calls`, which the client's sessions
share; the jobs, compile and audit areas are the mixins of ipupod.jobs, ipupod.compiling and
ipupod.audit.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any, Callable, List, Optional, Union

import grpc

from ipupod import errors, transport
from ipupod._proto import execution_pb2, pod_pb2
from ipupod.attach import AttachStream
from ipupod.audit import AuditMixin
from ipupod.calls import Calls, Seconds, seconds_of, uint
from ipupod.compiling import CompileMixin
from ipupod.jobs import JobsMixin
from ipupod.session import Executable, Session

#: The CLI's default server address.
DEFAULT_SERVER = "127.0.0.1:50051"
#: Tokens are at most this many visible ASCII characters (they travel in a header).
TOKEN_BYTES_MAX = 4096
_USER_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")

#: Fault kinds by the CLI's names (``ipupod fault inject --kind``).
FAULT_KINDS = {
    "ipu-reset": pod_pb2.FAULT_KIND_IPU_RESET,
    "link-reset": pod_pb2.FAULT_KIND_LINK_RESET,
    "partition-reset": pod_pb2.FAULT_KIND_PARTITION_RESET,
    "full-reset": pod_pb2.FAULT_KIND_FULL_RESET,
    "unrecoverable": pod_pb2.FAULT_KIND_UNRECOVERABLE,
}


def _first_set(value: Optional[str], *variables: str, default: str = "") -> str:
    if value:
        return value
    for variable in variables:
        if os.environ.get(variable):
            return os.environ[variable]
    return default


def _client_label() -> str:
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{socket.gethostname()} pid {os.getpid()}: python {program}"[:200]


class Client(JobsMixin, CompileMixin, AuditMixin):
    """A connection to ipupodd (a simulated Graphcore IPU pod).

    Args:
        server: ``HOST:PORT``; default ``$IPUPOD_SERVER``, else ``127.0.0.1:50051`` (as the
            CLI).
        token: sent as ``authorization: Bearer TOKEN``; default ``$IPUPOD_TOKEN``.
        user: your name on an open-mode server (no tokens); default ``$IPUPOD_USER``, else
            ``$USER``. Ignored when a token is set (the token names the user).
        timeout: deadline of each unary call, in seconds (30).
        stream_timeout: deadline of each upload, weight transfer and run step (600).
        tls_ca: a PEM file of the CA that signed the server's certificate; with it the channel
            is TLS and trusts only that CA (the certificate must name the address in
            ``server``). Default ``$IPUPOD_TLS_CA``; without it a token is sent to loopback
            addresses only (anything else is refused, FAILED_PRECONDITION).
        tls_cert, tls_key: a client certificate and its key (PEM) for a server with mutual TLS;
            both or neither, and only with ``tls_ca``. Default ``$IPUPOD_TLS_CERT`` and
            ``$IPUPOD_TLS_KEY``.

    The channel is made here (TLS files read and checked first: a missing or malformed file is
    an ``ipupod.Error`` naming it); nothing is sent until the first call, which reports an
    unreachable server as ``ipupod.Error`` (UNAVAILABLE "cannot reach ipupodd at ...") and a
    failed TLS handshake as UNAUTHENTICATED "TLS handshake with ... failed: ...".
    Thread-safe: calls may come from several threads. ``close()`` (or ``with``) closes the
    channel, ending the sessions this client attached.

    Areas: pod (``pod_info``, ``inject_fault``, resets, ``repair_ipu``), partitions
    (``create_partition``, ``list_partitions``, ...), sessions (``attach``, ``session``,
    ``list_sessions``, ``get_session``, ``detach``, ``list_queue``), executables
    (``upload_executable``, ``stat_executable``; load and run through :class:`Session`) and
    batch jobs (``put_blob``, ``submit``, ``list_jobs``, ``wait_job``, ``fetch_results``, ...),
    compiling on the server (``compile``), the usage ledger (``usage``, ``history``) and, for
    admins, the audit log (``audit``).
    """

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None,
                 user: Optional[str] = None, timeout: float = 30.0,
                 stream_timeout: float = 600.0, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None) -> None:
        self.server = _first_set(server, "IPUPOD_SERVER", default=DEFAULT_SERVER)
        self.token = _first_set(token, "IPUPOD_TOKEN")
        self.user = _first_set(user, "IPUPOD_USER", "USER", default="nobody")
        timeout, stream_timeout = float(timeout), float(stream_timeout)
        self.tls_ca = _first_set(tls_ca, "IPUPOD_TLS_CA")
        self.tls_cert = _first_set(tls_cert, "IPUPOD_TLS_CERT")
        self.tls_key = _first_set(tls_key, "IPUPOD_TLS_KEY")
        self._check_options(timeout, stream_timeout)
        connection = transport.connect(self.server, self.token, self.user, self.tls_ca,
                                       self.tls_cert, self.tls_key, "ipupod.Client")
        #: Every call goes through this (ipupod.calls); sessions share it.
        self._calls = Calls(connection, timeout, stream_timeout)

    @property
    def calls(self) -> Calls:
        """The calls layer every RPC of this client and of its sessions goes through
        (:class:`ipupod.calls.Calls`: the channel, the stubs, deadlines and errors). For the
        package's own modules and tools that measure it; not a stable interface."""
        return self._calls

    @property
    def timeout(self) -> float:
        """The deadline of each unary call, in seconds."""
        return self._calls.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._calls.timeout = seconds

    @property
    def stream_timeout(self) -> float:
        """The deadline of each upload, weight transfer and run step, in seconds."""
        return self._calls.stream_timeout

    @stream_timeout.setter
    def stream_timeout(self, seconds: float) -> None:
        self._calls.stream_timeout = seconds

    @property
    def inline_steps(self) -> bool:
        """Session.run sends a step whose inputs hold at most 1 MiB as one RunInline call;
        False makes every step take the Run stream (set by itself against a server without
        RunInline)."""
        return self._calls.inline_steps

    @inline_steps.setter
    def inline_steps(self, enabled: bool) -> None:
        self._calls.inline_steps = enabled

    def _check_options(self, timeout: float, stream_timeout: float) -> None:
        location = "ipupod.Client"
        if not self.server:
            raise errors.local_error(f"no server address; pass server='HOST:PORT' (default "
                                     f"{DEFAULT_SERVER})", grpc.StatusCode.INVALID_ARGUMENT,
                                     location)
        if not (timeout > 0 and stream_timeout > 0):
            raise errors.local_error("timeout and stream_timeout must be positive seconds",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)
        if self.token and (len(self.token) > TOKEN_BYTES_MAX or not all(
                0x21 <= ord(c) <= 0x7e for c in self.token)):
            raise errors.local_error(
                f"the token ({len(self.token)} characters) is not a valid ipupod token: tokens "
                f"are at most {TOKEN_BYTES_MAX} visible ASCII characters; check token= / "
                f"$IPUPOD_TOKEN", grpc.StatusCode.UNAUTHENTICATED, location)
        transport.check(self.server, self.token, self.tls_ca, self.tls_cert, self.tls_key,
                        location)
        if not self.token and not _USER_NAME.match(self.user):
            shown = self.user[:80].encode("unicode_escape").decode("ascii")
            raise errors.local_error(
                f'user name "{shown}{"..." if len(self.user) > 80 else ""}" is not valid: use '
                f"1-64 characters from A-Z a-z 0-9 . _ - @ (pass user=NAME)",
                grpc.StatusCode.INVALID_ARGUMENT, location)

    def __repr__(self) -> str:
        who = "token" if self.token else f"user {self.user}"
        return f"<ipupod.Client {self.server} ({who}{', TLS' if self.tls_ca else ''})>"

    def close(self) -> None:
        """Closes the channel; sessions attached through it end."""
        self._calls.connection.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ pod

    def pod_info(self) -> pod_pb2.GetPodInfoResponse:
        """The pod (``.pod``: name, IPU count, free IPUs, open mode, ...), every IPU
        (``.ipus``), partition (``.partitions``) and session (``.sessions``)."""
        return self._calls.unary(self._calls.pod.GetPodInfo, pod_pb2.GetPodInfoRequest(),
                                 "PodService.GetPodInfo")

    def inject_fault(self, ipu: int, kind: Union[str, int]) -> pod_pb2.InjectFaultResponse:
        """Admin: injects a fault on one IPU. ``kind``: ``"ipu-reset"``, ``"link-reset"``,
        ``"partition-reset"``, ``"full-reset"``, ``"unrecoverable"`` (or a FaultKind value).
        The sessions concerned see the error on their next operation."""
        if isinstance(kind, str):
            if kind not in FAULT_KINDS:
                raise errors.local_error(f"unknown fault kind '{kind}'; use one of "
                                         f"{', '.join(FAULT_KINDS)}",
                                         grpc.StatusCode.INVALID_ARGUMENT, "Client.inject_fault")
            kind = FAULT_KINDS[kind]
        request = pod_pb2.InjectFaultRequest(ipu=uint(ipu, "ipu", "Client.inject_fault"),
                                             kind=kind)
        return self._calls.unary(self._calls.pod.InjectFault, request, "PodService.InjectFault")

    def reset_ipu(self, ipu: int) -> pod_pb2.ResetResponse:
        """Resets one IPU (clears IPU_RESET); its session must load again."""
        request = pod_pb2.ResetIpuRequest(ipu=uint(ipu, "ipu", "Client.reset_ipu"))
        return self._calls.unary(self._calls.pod.ResetIpu, request, "PodService.ResetIpu")

    def reset_pod(self) -> pod_pb2.ResetResponse:
        """Admin: resets every IPU (clears every recoverable error)."""
        return self._calls.unary(self._calls.pod.ResetPod, pod_pb2.ResetPodRequest(),
                                 "PodService.ResetPod")

    def repair_ipu(self, ipu: int) -> pod_pb2.RepairIpuResponse:
        """Admin: returns a FAILED IPU to service."""
        request = pod_pb2.RepairIpuRequest(ipu=uint(ipu, "ipu", "Client.repair_ipu"))
        return self._calls.unary(self._calls.pod.RepairIpu, request, "PodService.RepairIpu")

    # ------------------------------------------------------------------ partitions

    def create_partition(self, name: str, size: int) -> pod_pb2.Partition:
        """A named partition of ``size`` IPUs (a power of two, an aligned block), yours."""
        request = pod_pb2.CreatePartitionRequest(
            name=name, size=uint(size, "size", "Client.create_partition"))
        return self._calls.unary(self._calls.partitions.CreatePartition, request,
                                 "PartitionService.CreatePartition")

    def get_partition(self, name: str) -> pod_pb2.Partition:
        """One partition: size, IPUs, owner, sessions (NOT_FOUND when there is none)."""
        return self._calls.unary(self._calls.partitions.GetPartition,
                                 pod_pb2.GetPartitionRequest(name=name),
                                 "PartitionService.GetPartition")

    def list_partitions(self) -> List[pod_pb2.Partition]:
        """Every partition of the pod."""
        response = self._calls.unary(self._calls.partitions.ListPartitions,
                                     pod_pb2.ListPartitionsRequest(),
                                     "PartitionService.ListPartitions")
        return list(response.partitions)

    def remove_partition(self, name: str, force: bool = False) -> List[str]:
        """Removes a partition; ``force`` detaches its sessions first. Returns them."""
        response = self._calls.unary(self._calls.partitions.RemovePartition,
                                     pod_pb2.RemovePartitionRequest(name=name, force=force),
                                     "PartitionService.RemovePartition")
        return list(response.detached_sessions)

    def reset_partition(self, name: str) -> pod_pb2.ResetResponse:
        """Clears IPU_RESET, LINK_RESET and PARTITION_RESET errors on a partition's IPUs."""
        return self._calls.unary(self._calls.partitions.ResetPartition,
                                 pod_pb2.ResetPartitionRequest(name=name),
                                 "PartitionService.ResetPartition")

    # ------------------------------------------------------------------ sessions

    def attach(self, ipus: int = 1, *, partition: str = "", wait: bool = False,
               wait_timeout: Optional[Seconds] = None, auto_round: bool = False,
               on_position: Optional[Callable[[pod_pb2.QueuePosition], None]] = None,
               on_preempted: Optional[Callable[[pod_pb2.Preemption], None]] = None,
               account: str = "", qos: str = "", time_limit: Optional[Seconds] = None,
               label: Optional[str] = None) -> Session:
        """Attaches to ``ipus`` IPUs and returns the :class:`Session` once granted.

        The session lives as long as its attach stream, which a background thread holds: use
        the session as a context manager (or call ``release()``) to give the IPUs back.

        Args:
            ipus: how many (a power of two, or any count with ``auto_round``).
            partition: one of your partitions ("" = the free pool).
            wait: queue when nothing fits now (else RESOURCE_EXHAUSTED at once).
            wait_timeout: give up waiting after this long (seconds or timedelta; None = wait
                until granted; Ctrl-C leaves the queue).
            on_position: called on this thread with each ``QueuePosition`` (``position``,
                ``queue_length``, ``blocking_sessions``) while waiting.
            on_preempted: called on the stream's thread with the ``Preemption`` notice of a
                preemptible session (also kept in ``session.preempted``).
            account, qos, time_limit: fair sharing: the account charged, the QoS, and the
                longest the IPUs are held (docs/scheduling.md).
            label: shown in ``ipupod queue`` and ``info`` (default: host, pid and script).
        """
        location = "Client.attach"
        request = pod_pb2.AttachRequest(
            num_ipus=uint(ipus, "ipus", location, minimum=1), partition=partition, wait=wait,
            wait_timeout_seconds=seconds_of(wait_timeout, "wait_timeout", location),
            auto_round=auto_round, client=_client_label() if label is None else label,
            account=account, qos=qos,
            time_limit_seconds=seconds_of(time_limit, "time_limit", location))
        stream = AttachStream(self._calls.sessions, request, self._calls.connection,
                              on_preempted)
        if not wait:
            timeout = self.timeout
        elif request.wait_timeout_seconds > 0:
            timeout = request.wait_timeout_seconds + self.timeout
        else:
            timeout = None
        info = stream.wait_for_grant(on_position, timeout)
        return Session(self, info, stream)

    def session(self, session_id: Optional[str] = None) -> Session:
        """A handle on a session held elsewhere (default ``$IPUPOD_SESSION``, set by
        ``ipupod attach -- COMMAND``); its ``release()`` does nothing."""
        session_id = session_id or os.environ.get("IPUPOD_SESSION", "")
        if not session_id:
            raise errors.local_error("no session: pass its id, or run under `ipupod attach -- "
                                     "...` which sets $IPUPOD_SESSION",
                                     grpc.StatusCode.INVALID_ARGUMENT, "Client.session")
        return Session(self, self.get_session(session_id))

    def list_sessions(self) -> List[pod_pb2.SessionInfo]:
        """Every session of the pod (from ``pod_info``)."""
        return list(self.pod_info().sessions)

    def get_session(self, session_id: str) -> pod_pb2.SessionInfo:
        """A session's state; raises its device error when one of its IPUs faulted."""
        return self._calls.get_session(session_id)

    def detach(self, session_id: str) -> List[int]:
        """Ends a session (yours, or any as admin); returns the IPUs released."""
        return self._calls.detach(session_id)

    def reset_session(self, session_id: str) -> pod_pb2.ResetResponse:
        """Resets a session's IPUs as one device (up to PARTITION_RESET)."""
        return self._calls.reset_session(session_id)

    def list_queue(self) -> List[pod_pb2.QueueEntry]:
        """The attach queue in the order it is walked, with priorities and reasons."""
        response = self._calls.unary(self._calls.sessions.ListQueue, pod_pb2.ListQueueRequest(),
                                     "SessionService.ListQueue")
        return list(response.entries)

    def get_shares(self) -> pod_pb2.GetSharesResponse:
        """Every account's shares, usage and fair-share factor (``ipupod shares``)."""
        return self._calls.unary(self._calls.sessions.GetShares, pod_pb2.GetSharesRequest(),
                                 "SessionService.GetShares")

    # ------------------------------------------------------------------ executables

    def stat_executable(self, sha256: str) -> execution_pb2.ExecutableRef:
        """The server's record of an executable you uploaded; NOT_FOUND when it lacks it."""
        return self._calls.stat_executable(sha256)

    def upload_executable(self, executable: Executable) -> execution_pb2.ExecutableRef:
        """Uploads an ``.ipx`` (a path or its bytes) unless the server already holds it for
        you (StatExecutable by the hash in its header: then ``cache_hit`` is set). The file is
        streamed in 1 MiB chunks; INVALID_ARGUMENT, before anything is sent, when it is not an
        .ipx."""
        return self._calls.upload_executable(executable)
