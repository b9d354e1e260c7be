"""Installing ipupod as a service: `cmake --install`, the systemd unit, the Debian packages.

Run by ctest (label `deploy`, stage 1 of deploy/test.sh) with /usr/bin/python3 -m pytest;
$IPUPOD_BUILD_DIR is the build to install. Nothing here touches the host outside temporary
directories: the installation is staged under a prefix, the packages are unpacked with
dpkg-deb, and systemd is stood in for by a datagram socket of the test's own
($NOTIFY_SOCKET), which is all ipupodd's side of Type=notify needs.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

BUILD = Path(os.environ["IPUPOD_BUILD_DIR"])
DEADLINE_S = 60


def run(argv, **kwargs):
    """Runs argv to completion; stdout and stderr captured as text."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """The build installed under a fresh prefix, both components."""
    prefix = tmp_path_factory.mktemp("stage") / "prefix"
    for component in ("ipupod", "python"):
        done = run(["cmake", "--install", str(BUILD), "--prefix", str(prefix),
                    "--component", component])
        assert done.returncode == 0, done.stdout + done.stderr
    return prefix


def test_install_puts_every_file_in_place(stage):
    for name in ("ipupodd", "ipupod", "ipupod-replay"):
        assert os.access(stage / "bin" / name, os.X_OK), name
    assert (stage / "lib/systemd/system/ipupodd.service").is_file()
    assert (stage / "lib/sysusers.d/ipupod.conf").read_text().startswith("#")
    assert "u ipupod" in (stage / "lib/sysusers.d/ipupod.conf").read_text()
    config = stage / "etc/ipupod/ipupodd.json"
    assert config.stat().st_mode & 0o777 == 0o640, oct(config.stat().st_mode)
    assert (stage / "share/doc/ipupod/README.md").is_file()
    assert (stage / "share/doc/ipupod/docs/operations.md").is_file()
    assert (stage / "lib/python3/dist-packages/ipupod/v1/pod_pb2.py").is_file()
    assert not list((stage / "lib/python3/dist-packages").rglob("__pycache__"))


def test_installed_unit_names_the_installed_files(stage):
    unit = (stage / "lib/systemd/system/ipupodd.service").read_text()
    exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    assert exec_start.startswith(f"{stage}/bin/ipupodd --config {stage}/etc/ipupod/ipupodd.json")
    assert "/usr/bin/ipupodd" not in unit


def test_unit_verifies_cleanly(stage):
    unit = stage / "lib/systemd/system/ipupodd.service"
    verified = run(["systemd-analyze", "verify", str(unit)])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout + verified.stderr == "", verified.stdout + verified.stderr


def test_unit_security_rating(stage):
    """Prints systemd's exposure rating (0 safest, 10 least) and keeps it from creeping up."""
    unit = stage / "lib/systemd/system/ipupodd.service"
    rated = run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)])
    found = re.search(r"Overall exposure level for ipupodd.service: ([0-9.]+) (\w+)",
                      rated.stdout + rated.stderr)
    assert found, rated.stdout + rated.stderr
    print(f"systemd-analyze security: {found.group(1)} {found.group(2)}")
    assert float(found.group(1)) <= 2.5, rated.stdout


class NotifySocket:
    """A stand-in for systemd's notify socket: collects what ipupodd sends."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []

    def wait_for(self, key, timeout=DEADLINE_S):
        """Returns the first message (a dict) not yet consumed that sets `key`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, message in enumerate(self.messages):
                if key in message:
                    del self.messages[: i + 1]
                    return message
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            self.messages.append(dict(line.split("=", 1) for line in data.splitlines() if line))
        pytest.fail(f"no {key} from ipupodd within {timeout} s; got {self.messages}")


def test_installed_server_speaks_the_notify_protocol(stage, tmp_path):
    """Starts the installed ipupodd as the unit's ExecStart does (state dir and port
    redirected), then walks it through ready, reload and stop as systemd would."""
    unit = (stage / "lib/systemd/system/ipupodd.service").read_text()
    argv = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.M).group(1))
    argv = argv[: argv.index("--state-dir")]
    argv += ["--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0"]
    notify = NotifySocket(tmp_path / "notify")
    env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        ready = notify.wait_for("READY")
        assert ready["STATUS"].startswith("ipupodd listening on 127.0.0.1:"), ready
        address = re.search(r"listening on (127\.0\.0\.1:\d+)", ready["STATUS"]).group(1)
        info = run([str(stage / "bin/ipupod"), "--server", address, "--json", "info"])
        assert info.returncode == 0, info.stderr
        assert '"num_ipus": 16' in info.stdout or '"num_ipus":16' in info.stdout, info.stdout

        server.send_signal(signal.SIGHUP)
        assert "RELOADING" in notify.wait_for("RELOADING")
        reloaded = notify.wait_for("READY")
        assert reloaded["STATUS"].startswith("ipupodd listening on"), reloaded

        server.send_signal(signal.SIGTERM)
        assert notify.wait_for("STOPPING")["STATUS"] == "shutting down"
        assert server.wait(timeout=DEADLINE_S) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.stderr.read().rstrip().endswith("stopped")


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """Both .deb files, made by cpack from the build into a directory of their own."""
    out = tmp_path_factory.mktemp("debs")
    made = run(["cpack", "-G", "DEB", "--config", str(BUILD / "CPackConfig.cmake"), "-B", str(out)])
    assert made.returncode == 0, made.stdout + made.stderr
    debs = {p.name.split("_")[0]: p for p in out.glob("*.deb")}
    assert set(debs) == {"ipupod", "python3-ipupod"}, list(out.iterdir())
    return debs


def deb_field(deb, field):
    return run(["dpkg-deb", "--field", str(deb), field]).stdout.strip()


def test_server_package_contents(packages):
    deb = packages["ipupod"]
    listing = run(["dpkg-deb", "--contents", str(deb)]).stdout
    for path in ("./usr/bin/ipupodd", "./usr/bin/ipupod", "./usr/lib/systemd/system/ipupodd.service",
                 "./usr/lib/sysusers.d/ipupod.conf", "./etc/ipupod/ipupodd.json",
                 "./usr/share/doc/ipupod/README.md",
                 "./usr/libexec/ipupod/ipupod-custom-op-host",
                 "./usr/include/ipupod/custom_op_abi.h"):
        assert path in listing, path
    depends = deb_field(deb, "Depends")
    for library in ("libgrpc++", "libsqlite3", "libopenblas", "libsystemd0", "adduser"):
        assert library in depends, depends
    control = run(["dpkg-deb", "--ctrl-tarfile", str(deb)], ).returncode
    assert control == 0
    members = run(["sh", "-c", f"dpkg-deb --ctrl-tarfile {shlex.quote(str(deb))} | tar -t"]).stdout
    for member in ("./postinst", "./prerm", "./postrm", "./conffiles"):
        assert member in members, members


def test_packaged_unit_is_the_debian_one(packages, tmp_path):
    root = tmp_path / "root"
    assert run(["dpkg-deb", "-x", str(packages["ipupod"]), str(root)]).returncode == 0
    unit = (root / "usr/lib/systemd/system/ipupodd.service").read_text()
    assert "ExecStart=/usr/bin/ipupodd --config /etc/ipupod/ipupodd.json" in unit
    version = run([str(root / "usr/bin/ipupodd"), "--version"])
    assert version.returncode == 0 and "ipupodd" in version.stdout, version.stdout + version.stderr


def test_python_package_imports_unpacked(packages, tmp_path):
    deb = packages["python3-ipupod"]
    assert deb_field(deb, "Architecture") == "all"
    assert "python3-grpcio" in deb_field(deb, "Depends")
    root = tmp_path / "root"
    assert run(["dpkg-deb", "-x", str(deb), str(root)]).returncode == 0
    site = root / "usr/lib/python3/dist-packages"
    imported = run(["/usr/bin/python3", "-c", "import ipupod, ipupod.v1.pod_pb2; print(ipupod.Client)"],
                   env=dict(os.environ, PYTHONPATH=str(site)), cwd=str(tmp_path))
    assert imported.returncode == 0, imported.stderr
