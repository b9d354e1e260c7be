"""``ipupod.testing``: a private ipupodd for integration tests, and the pytest plugin around it.

Test your own tooling against a real server, started per test on an ephemeral loopback port
with a temporary state directory, and stopped afterwards::

    import pytest

    @pytest.mark.ipupod(pod="POD4", config={"reset_ms": {"ipu": 10}})
    def test_my_tool(ipupod_server):
        client = ipupod_server.client(user="alice")
        assert client.pod_info().pod.num_ipus == 4
        subprocess.run(["my-tool", "--server", ipupod_server.address], check=True)

The plugin is registered as the ``pytest11`` entry point ``ipupod.testing`` when the package
is installed; from a build tree use ``PYTHONPATH=build/python python3 -m pytest -p
ipupod.testing``. Fixtures:

* ``ipupod_server``: a :class:`LocalServer`, configured by the test's ``ipupod`` marker
  (the keyword arguments of :class:`LocalServer`: ``pod``, ``config``, ``random_faults``,
  ``args``, ``env``, ``user``, ``tls``, ``client_tls``).
* ``ipupod_client``: ``ipupod_server.client()``, closed afterwards.
* ``ipupod_server_factory``: a function taking the same arguments, for several servers in
  one test or settings computed at run time; all are stopped afterwards.

:class:`LocalServer` is usable without pytest too (a context manager). It finds ``ipupodd``
through ``$IPUPOD_SERVER_BINARY``, else the build tree this package was loaded from
(``build/python/ipupod`` -> ``build/server/ipupodd``) or ``$IPUPOD_BUILD_DIR``, else ``PATH``.
It learns the port as the C++ test harness does: ``--listen 127.0.0.1:0`` and the line
ipupodd prints when ready ("ipupodd listening on 127.0.0.1:PORT ..."), then waits until
GetPodInfo answers. Stopping sends SIGTERM to that process, waits up to 10 s, then SIGKILLs
it; nothing else is signalled. Where ``setpriv`` exists the server is started with
``--pdeathsig KILL``, so it dies with the test process even if that is killed outright
(the parent is the thread that started it: start servers from a thread that outlives them).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from ipupod.client import Client
from ipupod.errors import Error

_READY_PREFIX = "listening on 127.0.0.1:"
_START_SECONDS = 30.0
_STOP_SECONDS = 10.0


def _metrics_url(ready_line: str) -> str:
    """The "http://HOST:PORT" (or https) the ready line ends with; "" without one."""
    for scheme in ("; http://", "; https://"):
        if scheme in ready_line:
            return scheme[2:] + ready_line.split(scheme, 1)[1].split()[0]
    return ""


def find_binary(name: str, variable: str) -> str:
    """The path of ``name`` (``ipupodd`` or ``ipupod``): ``$variable``, else the build tree
    this package sits in or ``$IPUPOD_BUILD_DIR``, else PATH. FileNotFoundError saying where
    it looked."""
    folder = {"ipupodd": "server", "ipupod": "client"}.get(name, "")
    candidates = []
    if os.environ.get(variable):
        candidates.append(os.environ[variable])
    here = Path(__file__).resolve().parent  # build/python/ipupod in a build tree
    candidates.append(str(here.parent.parent / folder / name))
    if os.environ.get("IPUPOD_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["IPUPOD_BUILD_DIR"], folder, name))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"cannot find {name}: set ${variable}, build it (bash deploy/build.sh; it is then "
        f"build/{folder}/{name}), or put it on PATH (looked at: {', '.join(candidates)})")


class LocalServer:
    """An ipupodd on 127.0.0.1:<ephemeral> with a temporary state directory.

    Args:
        pod: the pod to simulate ("POD4", "POD16", or an IPU count); default the server's.
        config: the server's JSON config as a dict (docs/configuration.md), written to a file
            passed with ``--config``; e.g. ``{"tokens": [...], "reset_ms": {"ipu": 10}}``.
        random_faults: seeded chaos, merged into ``config`` as ``random_faults``
            (``{"seed": 1, "probability_per_operation": 0.1, "kinds": ["ipu-reset"]}``).
        args: more ``ipupodd`` flags.
        env: more environment for the server (e.g. ``IPUPOD_TEST_STORE_FAULT``).
        user: the default user of :meth:`client` in open mode ("pytest"; "admin" is an
            admin unless ``config`` changes ``open_mode_admins``).
        binary: the ``ipupodd`` to run (default: :func:`find_binary`).
        tls: the server's TLS files, merged into ``config`` as ``tls``: ``{"cert": PATH, "key":
            PATH}``, plus ``"client_ca"`` for mutual TLS (docs/configuration.md, "Transport
            security"; the certificate must name 127.0.0.1, e.g. ``subjectAltName =
            IP:127.0.0.1,DNS:localhost``).
        client_tls: how this server's clients connect: keyword arguments of
            :class:`ipupod.Client` (``{"tls_ca": PATH}``, plus ``tls_cert`` and ``tls_key``
            for mutual TLS), used by the start-up probe and by :meth:`client`.

    Attributes: ``address`` ("127.0.0.1:PORT"), ``port``, ``process`` (the
    ``subprocess.Popen``), ``state_dir``, ``log_path`` (the server's stderr),
    ``metrics_url`` (its HTTP listener, "http://127.0.0.1:PORT", serving ``/metrics`` and
    ``/healthz``; "" when the config turns it off). Each start picks a free port for it
    (``--metrics-listen 127.0.0.1:0``) unless ``config`` or ``args`` choose one.
    """

    def __init__(self, pod: Optional[str] = None, config: Optional[Mapping[str, Any]] = None,
                 random_faults: Optional[Mapping[str, Any]] = None,
                 args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
                 user: str = "pytest", binary: Optional[str] = None,
                 tls: Optional[Mapping[str, str]] = None,
                 client_tls: Optional[Mapping[str, str]] = None) -> None:
        self.binary = binary or find_binary("ipupodd", "IPUPOD_SERVER_BINARY")
        self._client_tls = dict(client_tls or {})
        self._dir = tempfile.mkdtemp(prefix="ipupod-test-")
        self.state_dir = os.path.join(self._dir, "state")
        self.log_path = os.path.join(self._dir, "ipupodd.log")
        self.user = user
        self.port = 0
        self.metrics_url = ""
        self.process: Optional[subprocess.Popen] = None
        self._clients: List[Client] = []
        if tls is not None:
            config = dict(config or {}, tls=dict(tls))
        self._argv = self._command(pod, config, random_faults, args)
        self._env = dict(os.environ, **(env or {}))
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def _command(self, pod: Optional[str], config: Optional[Mapping[str, Any]],
                 random_faults: Optional[Mapping[str, Any]], args: Sequence[str]) -> List[str]:
        argv = [self.binary, "--state-dir", self.state_dir]
        merged = dict(config or {})
        if random_faults is not None:
            merged["random_faults"] = dict(random_faults)
        if merged:
            path = os.path.join(self._dir, "ipupodd.json")
            with open(path, "w") as file:
                json.dump(merged, file)
            argv += ["--config", path]
        if pod is not None:
            argv += ["--pod", str(pod)]
        if "metrics_listen" not in merged and "--metrics-listen" not in args:
            # A restart keeps the gRPC port, and with it ipupodd would take the fixed
            # default metrics port: servers of parallel tests must not collide on it.
            argv += ["--metrics-listen", "127.0.0.1:0"]
        return argv + list(args)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts the server (on its previous port after a :meth:`stop`, keeping the state)
        and waits until it answers; RuntimeError with its log when it does not."""
        listen = ["--listen", self.address]
        prefix = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(prefix + self._argv + listen, env=self._env,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=log, start_new_session=True)
        deadline = time.monotonic() + _START_SECONDS
        line = self._ready_line(deadline)
        if _READY_PREFIX not in line:
            self._kill()
            raise RuntimeError(f"ipupodd did not start ({' '.join(self._argv + listen)}): "
                               f"{line.strip() or 'no ready line'}\n{self.log()}")
        self.port = int(line.split(_READY_PREFIX, 1)[1].split()[0])
        self.metrics_url = _metrics_url(line)
        self._wait_until_answering(deadline)

    def _ready_line(self, deadline: float) -> str:
        stdout = self.process.stdout
        data = b""
        while b"\n" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            piece = os.read(stdout.fileno(), 4096)
            if not piece:
                break
            data += piece
        return data.decode("utf-8", "replace")

    def _wait_until_answering(self, deadline: float) -> None:
        with Client(server=self.address, user="pytest", timeout=5.0,
                    **self._client_tls) as probe:
            while True:
                try:
                    probe.pod_info()
                    return
                except Error as error:
                    if error.type.startswith("ipupodd."):
                        return  # it answered (e.g. UNAUTHENTICATED: a server with tokens)
                    if time.monotonic() >= deadline or self.process.poll() is not None:
                        self._kill()
                        raise RuntimeError(f"ipupodd at {self.address} does not answer: "
                                           f"{error}\n{self.log()}") from None
                time.sleep(0.05)

    def client(self, user: Optional[str] = None, token: Optional[str] = None,
               **options: Any) -> Client:
        """A :class:`ipupod.Client` of this server (``user`` or ``token``; closed by
        :meth:`close`). ``options`` go to the Client (``timeout``, ``stream_timeout``, the TLS
        files, which default to ``client_tls``)."""
        client = Client(server=self.address, token=token or "",
                        user=user or (None if token else self.user),
                        **dict(self._client_tls, **options))
        self._clients.append(client)
        return client

    def log(self, lines: int = 200) -> str:
        """The last ``lines`` lines of the server's log (its stderr)."""
        try:
            with open(self.log_path, "rb") as file:
                text = file.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        """Stops the server (``sig``, then after 10 s SIGKILL) and returns its exit code; the
        state directory stays for a :meth:`start`; clients made by :meth:`client` stay open
        (they reconnect to a server started again)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(sig)
        try:
            self.process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._kill()
        self._close_pipe()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL, no chance to clean up (a crash); :meth:`start` brings it back."""
        self.stop(signal.SIGKILL)

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(_STOP_SECONDS)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def close(self) -> None:
        """Closes the clients made by :meth:`client`, stops the server and removes its state
        directory."""
        for client in self._clients:
            client.close()
        self._clients = []
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


# ---------------------------------------------------------------- pytest plugin

try:
    import pytest
except ImportError:  # pragma: no cover - the module works without pytest
    pytest = None

if pytest is not None:

    def pytest_configure(config: Any) -> None:
        config.addinivalue_line(
            "markers", "ipupod(pod=None, config=None, random_faults=None, args=(), env=None, "
            "user='pytest', tls=None, client_tls=None): how the ipupod_server fixture starts "
            "ipupodd (ipupod.testing)")

    def _marker_settings(request: Any) -> Dict[str, Any]:
        marker = request.node.get_closest_marker("ipupod")
        return dict(marker.kwargs) if marker is not None else {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
        """A failed test's report carries the log of each server its fixtures started."""
        outcome = yield
        report = outcome.get_result()
        if report.when != "call" or not report.failed:
            return
        for server in getattr(item, "_ipupod_servers", ()):
            report.sections.append((f"ipupodd {server.address} log", server.log()))

    def _track(request: Any, server: LocalServer) -> None:
        servers = getattr(request.node, "_ipupod_servers", [])
        servers.append(server)
        request.node._ipupod_servers = servers

    @pytest.fixture
    def ipupod_server(request: Any) -> Iterator[LocalServer]:
        """A private ipupodd for this test (see ipupod.testing; settings: the ``ipupod``
        marker)."""
        server = LocalServer(**_marker_settings(request))
        _track(request, server)
        try:
            yield server
        finally:
            server.close()

    @pytest.fixture
    def ipupod_client(ipupod_server: LocalServer) -> Iterator[Client]:
        """A client of ``ipupod_server`` as its default user."""
        yield ipupod_server.client()

    @pytest.fixture
    def ipupod_server_factory(request: Any) -> Iterator[Any]:
        """``start(**LocalServer arguments) -> LocalServer``; every server is stopped after
        the test."""
        servers: List[LocalServer] = []

        def start(**settings: Any) -> LocalServer:
            server = LocalServer(**settings)
            servers.append(server)
            _track(request, server)
            return server

        yield start
        for server in servers:
            server.close()
