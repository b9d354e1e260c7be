"""ipupod.testing: the local server, its pytest plugin and fixtures, as a user's tests use them."""

import os
import signal
import subprocess
import sys
import textwrap

import grpc
import pytest

import ipupod
from ipupod.testing import LocalServer, find_binary


def test_a_local_server_stops_in_order_and_starts_again_on_its_state():
    server = LocalServer(pod="POD4")
    try:
        first_port = server.port
        server.client(user="alice").create_partition("kept", 2)
        assert server.stop() == 0  # SIGTERM: an orderly stop
        assert "stopped" in server.log()
        server.start()
        assert server.port == first_port
        assert [p.name for p in server.client(user="alice").list_partitions()] == ["kept"]
        server.kill()
        assert server.process.returncode == -signal.SIGKILL
    finally:
        server.close()
    assert not os.path.exists(server.state_dir)


def test_a_local_server_names_its_metrics_listener_on_every_start():
    import urllib.request

    def get(url):
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    server = LocalServer(pod="POD4")
    try:
        assert server.metrics_url.startswith("http://127.0.0.1:")
        assert get(server.metrics_url + "/healthz") == "ok\n"
        assert "ipupod_pod_ipus 4" in get(server.metrics_url + "/metrics")
        server.stop()
        server.start()  # the same gRPC port, a fresh metrics port: no fixed port to collide on
        assert "ipupod_pod_ipus 4" in get(server.metrics_url + "/metrics")
    finally:
        server.close()
    with LocalServer(config={"metrics_listen": "off"}) as quiet:
        assert quiet.metrics_url == ""


def test_stopping_a_server_signals_nothing_else():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with LocalServer() as server:
            pid = server.process.pid
        assert server.process.poll() is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_config_and_random_faults_reach_the_server():
    faults = {"seed": 1, "probability_per_operation": 1.0, "kinds": ["link-reset"]}
    with LocalServer(pod="POD4", config={"reset_ms": {"ipu": 10}}, random_faults=faults) as server:
        client = server.client()
        with client.attach(ipus=1) as session:
            with pytest.raises(ipupod.RecoverableError) as fault:
                session.get_loaded()
            assert fault.value.recovery_action == "LINK_RESET"


def test_a_server_that_cannot_start_says_why():
    with pytest.raises(RuntimeError) as failed:
        LocalServer(config={"no_such_key": 1})
    assert "no_such_key" in str(failed.value)


def test_the_factory_starts_independent_servers(ipupod_server_factory):
    one = ipupod_server_factory(pod="POD4")
    two = ipupod_server_factory(pod="POD16", user="carol")
    assert one.address != two.address
    assert two.client().pod_info().pod.num_ipus == 16
    assert two.client().user == "carol"


def test_binaries_are_found_through_the_environment(tmp_path, monkeypatch):
    fake = tmp_path / "my-ipupodd"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("IPUPOD_SERVER_BINARY", str(fake))
    assert find_binary("ipupodd", "IPUPOD_SERVER_BINARY") == str(fake)
    with pytest.raises(FileNotFoundError) as missing:
        find_binary("ipupod-no-such-tool", "IPUPOD_NO_SUCH_VARIABLE")
    assert "$IPUPOD_NO_SUCH_VARIABLE" in str(missing.value)


def run_pytest(tmp_path, source):
    """Runs a user's test file in a fresh pytest with the plugin loaded as documented."""
    path = tmp_path / "test_user.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ipupod.testing", "--strict-markers", "-q",
         "-p", "no:cacheprovider", str(path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(ipupod.__file__))))


def test_the_plugin_serves_a_users_tests(tmp_path):
    done = run_pytest(tmp_path, """
        import pytest

        @pytest.mark.ipupod(pod="POD4", config={"open_mode_admins": ["ops"]})
        def test_marker(ipupod_server, ipupod_client):
            assert ipupod_client.pod_info().pod.num_ipus == 4
            ipupod_server.client(user="ops").reset_pod()  # ops is the admin now

        def test_default(ipupod_server):
            assert ipupod_server.client().pod_info().pod.num_ipus == 16
            assert ipupod_server.process.poll() is None
    """)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_a_failed_users_test_shows_the_servers_log(tmp_path):
    done = run_pytest(tmp_path, """
        def test_fails(ipupod_client):
            ipupod_client.pod_info()
            assert False, "on purpose"
    """)
    assert done.returncode == 1
    assert "log -" in done.stdout and "method=GetPodInfo code=OK" in done.stdout


def test_errors_from_the_fixture_clients_are_ipupod_errors(ipupod_client):
    with pytest.raises(ipupod.Error) as missing:
        ipupod_client.get_partition("none")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
