"""Errors of the ipupod client, in PopTorch's shape (PopTorch features, section 4.3).

Every failure is an :class:`Error`; device faults are its two subclasses::

    Error                 message, type, location, code, details, kind, ipus
    +-- RecoverableError  recovery_action: IPU_RESET, LINK_RESET, PARTITION_RESET, FULL_RESET
    +-- UnrecoverableError  the IPU left service until an admin repairs it

ipupodd sends a device error's kind, recovery action and IPUs as trailing metadata
(``ipupod-error-kind``, ``ipupod-recovery-action``, ``ipupod-ipus``; docs/errors.md); this
module turns a ``grpc.RpcError`` into the matching exception, keeping the gRPC code. Failures
of the transport itself (nothing answered) become an UNAVAILABLE error that names the address
and says what to do, a failed TLS handshake an UNAUTHENTICATED one that says why (the server's
certificate not signed by ``tls_ca``, or not naming the address; a server without TLS), and a
client-side deadline says which call did not answer in time, as the C++ client does
(client/grpc_status.cc).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import grpc

KIND_KEY = "ipupod-error-kind"
ACTION_KEY = "ipupod-recovery-action"
IPUS_KEY = "ipupod-ipus"

#: Recovery actions, lowest level first: a reset at one level clears every one below it.
RECOVERY_ACTIONS = ("IPU_RESET", "LINK_RESET", "PARTITION_RESET", "FULL_RESET")

# Texts gRPC core uses when no server produced the status (the C++ client's list), matched
# case-insensitively so small wording changes across versions still match.
_TRANSPORT_PHRASES = (
    "failed to connect",
    "connection refused",
    "dns resolution failed",
    "socket closed",
    "connection reset",
    "broken pipe",
    "goaway",
    "endpoint",
    "connections to all backends failing",
    "empty address list",
    "transport closed",
    "keepalive",
    "name resolution",
    "no route to host",
)


class Error(Exception):
    """An ipupod error: PopTorch's ``poptorch.Error`` fields plus the gRPC status.

    Attributes:
        message: what went wrong and what to do, without any context.
        type: the part of the stack that raised it and the error's category:
            ``"ipupodd.<kind>"`` when the server answered (kind ``application``,
            ``recoverable`` or ``unrecoverable``), ``"transport.unavailable"`` when nothing
            answered, ``"transport.tls"`` when the TLS handshake failed,
            ``"transport.deadline"`` when the call's deadline passed,
            ``"client.<kind>"`` for what this library checked itself.
        location: where it was raised: ``"SessionService.GetSession at 127.0.0.1:50051"``
            for a call, ``"Session.infer"`` for a local check.
        code: the ``grpc.StatusCode`` (local checks use the code the server would).
        details: the status text exactly as ipupodd sent it ("" for local errors).
        kind: ``"application"``, ``"recoverable"`` or ``"unrecoverable"``.
        ipus: the IPU ids the error concerns (device errors), else empty.
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        type: str = "client.application",  # noqa: A002 - PopTorch's field name
        location: str = "",
        details: str = "",
        kind: str = "application",
        ipus: Sequence[int] = (),
    ) -> None:
        self.message = message
        self.type = type
        self.location = location
        self.code = code
        self.details = details
        self.kind = kind
        self.ipus = tuple(ipus)
        super().__init__(message)

    def __str__(self) -> str:
        context = [self.code.name, self.type]
        if self.location:
            context.append(self.location)
        return f"{self.message} ({'; '.join(context)})"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.message!r}, code={self.code.name}, "
                f"type={self.type!r}, location={self.location!r})")


class RecoverableError(Error):
    """A device fault that a reset clears (gRPC ABORTED).

    ``recovery_action`` names the reset: ``"IPU_RESET"``, ``"LINK_RESET"``,
    ``"PARTITION_RESET"`` or ``"FULL_RESET"`` (an admin's pod reset). After the reset the
    session's IPUs are empty: load the executable and write the weights again.
    """

    def __init__(self, message: str, *, recovery_action: str, **fields) -> None:
        super().__init__(message, **fields)
        self.recovery_action = recovery_action

    def __str__(self) -> str:
        return f"{super().__str__()} [recovery action {self.recovery_action}]"


class UnrecoverableError(Error):
    """A device fault that took an IPU out of service (gRPC DATA_LOSS, kind unrecoverable).

    The IPU stays ``failed`` until an admin repairs it; attach elsewhere and go on from a host
    copy of the state.
    """


def local_error(message: str, code: grpc.StatusCode, location: str) -> Error:
    """An error this library found before (or instead of) asking the server."""
    return Error(message, code=code, type="client.application", location=location)


def _trailer(trailers: Optional[Iterable], key: str) -> str:
    for entry in trailers or ():
        k, v = entry[0], entry[1]
        if k == key:
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return ""


def _has_ipupod_trailers(trailers: Optional[Iterable]) -> bool:
    return any(str(entry[0]).startswith("ipupod-") for entry in trailers or ())


def is_transport_failure(code: grpc.StatusCode, details: str, trailers: Optional[Iterable]) -> bool:
    """True when the status came from the transport rather than from ipupodd."""
    if code != grpc.StatusCode.UNAVAILABLE or _has_ipupod_trailers(trailers):
        return False
    text = (details or "").lower()
    return any(phrase in text for phrase in _TRANSPORT_PHRASES)


def cannot_reach(server: str, detail: str, location: str) -> Error:
    """UNAVAILABLE: the server could not be reached; says how to start or find it."""
    return Error(
        f"cannot reach ipupodd at {server}: {detail}; is it running? (start it with "
        f"`ipupodd --listen {server} --state-dir DIR`, or point ipupod.Client(server=...) / "
        f"$IPUPOD_SERVER at the running one)",
        code=grpc.StatusCode.UNAVAILABLE, type="transport.unavailable", location=location,
        details=detail)


def _handshake_problem(server: str, tls_ca: str, text: str) -> str:
    """What a failed TLS handshake (gRPC 1.51, OpenSSL 3) means, or "" (``text`` lower case)."""
    if "certificate verify failed" in text:
        return (f"the server's certificate is not signed by the CA in tls_ca '{tls_ca}' (or has "
                f"expired); pass the CA that signed the server's certificate")
    if "is not in peer certificate" in text:
        return (f"the server's certificate does not name {server} (its subjectAltName must list "
                f"the host you connect to, as IP:... or DNS:...); connect through a name it "
                f"lists, or reissue the certificate")
    if "wrong version number" in text:
        return ("the server does not speak TLS (it answered in plaintext); leave out tls_ca "
                "($IPUPOD_TLS_CA), or configure \"tls\" on the server")
    if "handshake failed" in text:
        return "check tls_ca, tls_cert and tls_key against the server's TLS configuration"
    return ""


def transport_failure(server: str, detail: str, location: str, *, tls_ca: str = "",
                      client_certificate: bool = False) -> Error:
    """A transport failure explained for a channel with (or without) TLS: a failed handshake is
    UNAUTHENTICATED (retrying cannot help), a connection closed while connecting says what TLS
    setting would fix it, anything else is :func:`cannot_reach` (client/grpc_status.cc's
    TransportFailureError)."""
    text = (detail or "").lower()
    problem = _handshake_problem(server, tls_ca, text) if tls_ca else ""
    if problem:
        return Error(f"TLS handshake with {server} failed: {problem} ({detail})",
                     code=grpc.StatusCode.UNAUTHENTICATED, type="transport.tls",
                     location=location, details=detail)
    if "failed to connect" in text and "socket closed" in text:
        if not tls_ca:
            return cannot_reach(server, f"{detail} (the server closed the connection while "
                                f"connecting: if it serves TLS, pass tls_ca=FILE or set "
                                f"$IPUPOD_TLS_CA)", location)
        if not client_certificate:
            message = (f"ipupodd at {server} closed the connection during the TLS handshake: it "
                       f"most likely requires a client certificate (mutual TLS); pass "
                       f"tls_cert=FILE and tls_key=FILE ($IPUPOD_TLS_CERT, $IPUPOD_TLS_KEY) with "
                       f"one its client CA signed ({detail})")
        else:
            message = (f"ipupodd at {server} closed the connection during the TLS handshake: it "
                       f"may not accept the client certificate in tls_cert (not signed by its "
                       f"client CA, or expired); check it with the server's operator ({detail})")
        return Error(message, code=grpc.StatusCode.UNAVAILABLE, type="transport.tls",
                     location=location, details=detail)
    return cannot_reach(server, detail, location)


def _parse_ipus(text: str) -> tuple:
    ipus = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit():
            ipus.append(int(part))
    return tuple(ipus)


def from_status(code: grpc.StatusCode, details: str, trailers: Optional[Iterable], *,
                location: str) -> Error:
    """The exception for a status ipupodd sent (device-error trailers read)."""
    kind = _trailer(trailers, KIND_KEY) or "application"
    action = _trailer(trailers, ACTION_KEY)
    ipus = _parse_ipus(_trailer(trailers, IPUS_KEY))
    message = details or f"ipupodd answered {code.name} without a message"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        message += " (in Python: ipupod.Client(token=...) or $IPUPOD_TOKEN; user=... in open mode)"
    fields = dict(code=code, type=f"ipupodd.{kind}", location=location, details=details,
                  kind=kind, ipus=ipus)
    if kind == "recoverable":
        return RecoverableError(message, recovery_action=action or "IPU_RESET", **fields)
    if kind == "unrecoverable":
        return UnrecoverableError(message, **fields)
    return Error(message, **fields)


def from_rpc_error(error: grpc.RpcError, *, server: str, method: str,
                   timeout: Optional[float], tls_ca: str = "",
                   client_certificate: bool = False) -> Error:
    """Converts what a gRPC call raised into an :class:`Error` (or a subclass).

    ``method`` is ``"Service.Method"``; ``timeout`` the call's deadline in seconds (None for
    none), for the message of a client-side deadline; ``tls_ca`` (the CA file, "" without TLS)
    and ``client_certificate`` say how the channel was secured, for transport failures.
    """
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else str(error)) or ""
    try:
        trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    except Exception:  # a call that never started has none
        trailers = None
    location = f"{method} at {server}"
    if is_transport_failure(code, details, trailers):
        return transport_failure(server, details, location, tls_ca=tls_ca,
                                 client_certificate=client_certificate)
    # gRPC's own text for a client-side deadline; a server-chosen DEADLINE_EXCEEDED keeps its
    # message.
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
        within = f" within {timeout:g} s" if timeout is not None else ""
        return Error(
            f"ipupodd at {server} did not answer {method}{within}; the server may be "
            f"overloaded or stuck (raise ipupod.Client(timeout=...) to wait longer)",
            code=code, type="transport.deadline", location=location, details=details)
    return from_status(code, details, trailers, location=location)


def malformed_stream(what: str, problem: str, location: str) -> Error:
    """INTERNAL: ipupodd sent a tensor stream this client cannot accept (the server's fault)."""
    return Error(f"ipupodd sent a malformed {what} stream: {problem}",
                 code=grpc.StatusCode.INTERNAL, type="client.application", location=location)
