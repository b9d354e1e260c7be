"""The bottom of :class:`ipupod.Client`: its channel, who it calls as, and how a failed call's
status becomes an :class:`ipupod.Error` (docs/python.md, "The package's layers").

:func:`connect` makes the channel (keepalive pings, TLS when ``tls_ca`` is set) and returns a
:class:`Connection`: the channel, the identity metadata every call carries (``authorization:
Bearer TOKEN``, else ``x-ipupod-user: USER``) and :meth:`Connection.error`, the status mapping
(errors.from_rpc_error with what the channel knows: the address, whether it is TLS, whether a
client certificate is presented).

TLS and the rule that a token never travels in clear text are the Python side of
client/transport_security.cc (docs/python.md, "TLS"):

* :func:`check` refuses, before anything is read or sent, a token with no ``tls_ca`` to a server
  that is not loopback (FAILED_PRECONDITION, saying to pass ``tls_ca``), and a ``tls_cert``
  without its ``tls_key`` (or the reverse), or either without ``tls_ca`` (INVALID_ARGUMENT).
* :func:`channel_credentials` reads each PEM file (a regular file of at most 1 MiB) and checks it
  with Python's ``ssl`` module (OpenSSL) before gRPC sees it: gRPC takes an unparsable CA
  without a word and then fails every call "empty address list". A missing file is NOT_FOUND,
  an unreadable one PERMISSION_DENIED, one without a certificate or key, or a key that does not
  belong to the certificate, INVALID_ARGUMENT; each message names the argument, the file and
  the fix.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import ssl
import stat
from typing import Optional

import grpc

from ipupod import errors

#: A PEM certificate chain or key is a few KB; a CA bundle about 200 KB (common/tls/pem.h's bound).
PEM_FILE_BYTES_MAX = 1 << 20
#: The channel's options: keepalive pings, and pings go on over a held but quiet attach stream
#: (gRPC's default stops after 2 pings without data).
CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


@dataclasses.dataclass(frozen=True)
class Connection:
    """A channel to ipupodd and who calls through it (made by :func:`connect`)."""

    server: str
    channel: grpc.Channel
    #: Sent with every call: ``authorization: Bearer TOKEN``, else ``x-ipupod-user: USER``.
    metadata: tuple
    #: How the channel is secured, for the messages of failed calls and handshakes.
    tls_ca: str = ""
    client_certificate: bool = False

    def error(self, failure: grpc.RpcError, method: str,
              timeout: Optional[float]) -> errors.Error:
        """A failed call's status as an :class:`ipupod.Error` naming the method and address."""
        return errors.from_rpc_error(failure, server=self.server, method=method, timeout=timeout,
                                     tls_ca=self.tls_ca,
                                     client_certificate=self.client_certificate)

    def close(self) -> None:
        self.channel.close()


def identity_metadata(token: str, user: str) -> tuple:
    """The metadata naming the caller: the token when there is one, else the user name."""
    if token:
        return (("authorization", f"Bearer {token}"),)
    return (("x-ipupod-user", user),)


def connect(server: str, token: str, user: str, tls_ca: str, tls_cert: str, tls_key: str,
            location: str) -> Connection:
    """Reads and checks the TLS files and makes the channel, for settings :func:`check` passed.
    Nothing is sent until the first call."""
    credentials = channel_credentials(tls_ca, tls_cert, tls_key, location)
    if credentials is None:
        channel = grpc.insecure_channel(server, options=list(CHANNEL_OPTIONS))
    else:
        channel = grpc.secure_channel(server, credentials, options=list(CHANNEL_OPTIONS))
    return Connection(server=server, channel=channel, metadata=identity_metadata(token, user),
                      tls_ca=tls_ca, client_certificate=bool(tls_cert))


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1, ::ffff:127.x.y.z or "localhost" (common/loopback.h)."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _host_of(address: str) -> str:
    if address.startswith("["):
        close = address.find("]")
        return address if close < 0 else address[1:close]
    if address.count(":") == 1:
        return address.split(":", 1)[0]
    return address  # a bare host, or a bare IPv6 address


def is_loopback_target(target: str) -> bool:
    """Whether a gRPC target (``server=``) reaches this machine only: a loopback HOST:PORT or
    [V6]:PORT, unix:PATH, unix-abstract:NAME, and dns:, ipv4:, ipv6: targets whose every address
    is loopback (common/loopback.h's IsLoopbackTarget)."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            addresses = target[len(scheme):]
            return bool(addresses) and all(
                is_loopback_host(_host_of(a)) for a in addresses.split(","))
    if target.startswith("dns:"):
        target = target[len("dns:"):]
        if target.startswith("//"):
            slash = target.find("/", 2)
            if slash < 0:
                return False
            target = target[slash + 1:]
    return bool(target) and is_loopback_host(_host_of(target))


def check(server: str, token: str, tls_ca: str, tls_cert: str, tls_key: str,
          location: str) -> None:
    """Raises :class:`ipupod.Error` when the settings do not fit together (see the module)."""
    if bool(tls_cert) != bool(tls_key):
        given, missing = ("tls_cert", "tls_key") if tls_cert else ("tls_key", "tls_cert")
        raise errors.local_error(
            f"a client certificate needs both tls_cert and tls_key ($IPUPOD_TLS_CERT, "
            f"$IPUPOD_TLS_KEY), but only {given} is set; pass {missing} too",
            grpc.StatusCode.INVALID_ARGUMENT, location)
    if tls_cert and not tls_ca:
        raise errors.local_error(
            "tls_cert and tls_key are for TLS, which needs tls_ca ($IPUPOD_TLS_CA): the CA that "
            "signed the server's certificate", grpc.StatusCode.INVALID_ARGUMENT, location)
    if token and not tls_ca and not is_loopback_target(server):
        raise errors.local_error(
            f"refusing to send the token to {server} in clear text: it is not a loopback "
            f"address and TLS is off; pass tls_ca=FILE ($IPUPOD_TLS_CA), the CA that signed the "
            f"server's certificate, or reach the server through a loopback address (an SSH "
            f"tunnel, a local TLS proxy)", grpc.StatusCode.FAILED_PRECONDITION, location)


def _read_pem(path: str, role: str, location: str) -> bytes:
    named = f"{role} '{path}'"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            problem = "is not a regular file; pass a file"
        elif info.st_size == 0:
            problem = "is empty (0 bytes)"
        elif info.st_size > PEM_FILE_BYTES_MAX:
            problem = (f"is {info.st_size} bytes, more than any PEM file this reads "
                       f"({PEM_FILE_BYTES_MAX}); is it the right file?")
        else:
            with open(path, "rb") as file:
                return file.read(PEM_FILE_BYTES_MAX)
    except FileNotFoundError:
        raise errors.local_error(f"{named} does not exist; check the path",
                                 grpc.StatusCode.NOT_FOUND, location) from None
    except PermissionError as error:
        raise errors.local_error(f"{named} cannot be read: {error.strerror}; make it readable "
                                 f"by this user", grpc.StatusCode.PERMISSION_DENIED,
                                 location) from None
    except OSError as error:
        raise errors.local_error(f"{named} cannot be read: {error.strerror}",
                                 grpc.StatusCode.INTERNAL, location) from None
    raise errors.local_error(f"{named} {problem}", grpc.StatusCode.INVALID_ARGUMENT, location)


def _not_a(path: str, role: str, what: str, reason: str, fix: str, location: str) -> errors.Error:
    return errors.local_error(f"'{path}' ({role}) is not {what}: {reason}; {fix}",
                              grpc.StatusCode.INVALID_ARGUMENT, location)


def _ssl_reason(error: ssl.SSLError) -> str:
    """OpenSSL's reason ("no certificate or crl found"), else the error's whole text."""
    return error.reason.replace("_", " ").lower() if error.reason else str(error)


def _check_certificates(path: str, pem: bytes, role: str, what: str, fix: str,
                        location: str) -> None:
    """``pem`` holds at least one certificate that parses."""
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise _not_a(path, role, what, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                     fix, location)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=pem.decode("ascii", "replace"))
    except ssl.SSLError as error:
        raise _not_a(path, role, what, _ssl_reason(error), fix, location) from None


def _check_key(tls_cert: str, tls_key: str, key: bytes, location: str) -> None:
    """The key parses (unencrypted) and belongs to the certificate."""
    role, fix = "tls_key, $IPUPOD_TLS_KEY", "pass the key that matches tls_cert"
    if b"PRIVATE KEY-----" not in key:
        raise _not_a(tls_key, role, "a PEM private key",
                     "holds no PEM private key (-----BEGIN PRIVATE KEY-----)", fix, location)
    if b"ENCRYPTED" in key:
        raise _not_a(tls_key, role, "an unencrypted PEM private key",
                     "the key is encrypted and ipupod reads keys without a passphrase; decrypt "
                     "it once with `openssl pkey -in KEY -out KEY.plain`", fix, location)
    try:
        # A password callback that answers nothing: an encrypted key fails instead of prompting.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(tls_cert, tls_key,
                                                               password=lambda: b"")
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise _not_a(tls_key, role, f"the key of '{tls_cert}'",
                         "the private key does not belong to the certificate", fix,
                         location) from None
        raise _not_a(tls_key, role, "an unencrypted PEM private key", _ssl_reason(error), fix,
                     location) from None


def channel_credentials(tls_ca: str, tls_cert: str, tls_key: str,
                        location: str) -> Optional[grpc.ChannelCredentials]:
    """None without ``tls_ca`` (a plaintext channel); else TLS trusting only that CA, presenting
    ``tls_cert``/``tls_key`` when set. Each file is read and checked first (see the module)."""
    if not tls_ca:
        return None
    root = _read_pem(tls_ca, "tls_ca file ($IPUPOD_TLS_CA)", location)
    _check_certificates(tls_ca, root, "tls_ca, $IPUPOD_TLS_CA", "a PEM CA certificate",
                        "pass the certificate of the CA that signed the server's certificate",
                        location)
    if not tls_cert:
        return grpc.ssl_channel_credentials(root_certificates=root)
    chain = _read_pem(tls_cert, "tls_cert file ($IPUPOD_TLS_CERT)", location)
    _check_certificates(tls_cert, chain, "tls_cert, $IPUPOD_TLS_CERT", "a PEM certificate",
                        "pass your client certificate, signed by the CA the server trusts",
                        location)
    key = _read_pem(tls_key, "tls_key file ($IPUPOD_TLS_KEY)", location)
    _check_key(tls_cert, tls_key, key, location)
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=key,
                                        certificate_chain=chain)
