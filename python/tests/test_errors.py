"""Errors in PopTorch's shape: every documented kind from a real ipupodd, a server that is
down, wrong tokens and names, deadlines."""

import socket
import time

import grpc
import pytest

import ipupod
from ipupod import errors
from conftest import run_cli

TOKENS = {"tokens": [{"token": "s3cret-alice", "user": "alice", "role": "user"},
                     {"token": "s3cret-ops", "user": "ops", "role": "admin"}]}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_server_that_is_down_is_named_with_what_to_do():
    address = f"127.0.0.1:{free_port()}"
    client = ipupod.Client(server=address, user="alice")
    with pytest.raises(ipupod.Error) as down:
        client.pod_info()
    assert down.value.code == grpc.StatusCode.UNAVAILABLE
    assert down.value.type == "transport.unavailable"
    assert down.value.message.startswith(f"cannot reach ipupodd at {address}: ")
    assert "is it running?" in down.value.message and "IPUPOD_SERVER" in down.value.message
    with pytest.raises(ipupod.Error) as attach:
        client.attach(ipus=1)
    assert attach.value.code == grpc.StatusCode.UNAVAILABLE
    assert f"cannot reach ipupodd at {address}" in attach.value.message


def test_the_server_and_token_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("IPUPOD_SERVER", "127.0.0.1:1")
    monkeypatch.setenv("IPUPOD_TOKEN", "from-env")
    client = ipupod.Client()
    assert client.server == "127.0.0.1:1" and client.token == "from-env"
    monkeypatch.delenv("IPUPOD_SERVER")
    monkeypatch.delenv("IPUPOD_TOKEN")
    monkeypatch.setenv("USER", "carol")
    monkeypatch.delenv("IPUPOD_USER", raising=False)
    defaults = ipupod.Client()
    assert defaults.server == ipupod.DEFAULT_SERVER == "127.0.0.1:50051"
    assert defaults.token == "" and defaults.user == "carol"


@pytest.mark.ipupod(config=TOKENS)
def test_tokens_name_the_user_and_a_wrong_one_says_so(ipupod_server):
    alice = ipupod_server.client(token="s3cret-alice")
    assert not alice.pod_info().pod.open_mode
    with alice.attach(ipus=1) as session:
        assert alice.get_session(session.id).user == "alice"
    for client in (ipupod_server.client(token="s3cret-bob"), ipupod_server.client(user="alice")):
        with pytest.raises(ipupod.Error) as refused:
            client.pod_info()
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert "token" in refused.value.message and "ipupod.Client(token=" in refused.value.message
    with pytest.raises(ipupod.Error) as ops_only:
        alice.reset_pod()
    assert ops_only.value.code == grpc.StatusCode.PERMISSION_DENIED
    ipupod_server.client(token="s3cret-ops").reset_pod()


def test_identities_the_server_would_refuse_are_refused_before_sending():
    with pytest.raises(ipupod.Error) as token:
        ipupod.Client(server="127.0.0.1:1", token="two words")
    assert token.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert token.value.type == "client.application"
    with pytest.raises(ipupod.Error) as user:
        ipupod.Client(server="127.0.0.1:1", user="no spaces please", token="")
    assert user.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not valid: use 1-64 characters" in user.value.message
    with pytest.raises(ipupod.Error) as timeout:
        ipupod.Client(server="127.0.0.1:1", user="a", timeout=0)
    assert timeout.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_client_deadline_names_the_call(ipupod_server):
    hasty = ipupod_server.client(timeout=1e-6)
    # gRPC checks a deadline on a timer, so a local answer now and then beats one of a
    # microsecond (seen 2026-11-26 on a busy machine): the first call that misses it is checked.
    late = None
    for _ in range(50):
        try:
            hasty.pod_info()
        except ipupod.Error as error:
            late = error
            break
    assert late is not None, "50 calls with a 1 us deadline all answered in time"
    assert late.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert late.type == "transport.deadline"
    assert "did not answer PodService.GetPodInfo within" in late.message


def test_unknown_session_and_ipu(ipupod_client):
    with pytest.raises(ipupod.Error) as session:
        ipupod_client.get_session("s9-99")
    assert session.value.code == grpc.StatusCode.NOT_FOUND
    assert not isinstance(session.value, (ipupod.RecoverableError, ipupod.UnrecoverableError))
    assert session.value.kind == "application" and session.value.details in session.value.message
    with pytest.raises(ipupod.Error) as ipu:
        ipupod_client.reset_ipu(999)
    assert ipu.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


@pytest.mark.ipupod(pod="POD4", config={"reset_ms": {"ipu": 20, "partition": 20, "pod": 20}})
@pytest.mark.parametrize("kind,action", [("ipu-reset", "IPU_RESET"),
                                         ("link-reset", "LINK_RESET"),
                                         ("partition-reset", "PARTITION_RESET"),
                                         ("full-reset", "FULL_RESET")])
def test_injected_recoverable_faults_raise_recoverable_error(ipupod_server, ipupod_client, kind,
                                                             action):
    with ipupod_client.attach(ipus=1) as session:
        ipu = session.ipus[0]
        done = run_cli(ipupod_server.address, "admin", "fault", "inject", "--ipu", str(ipu),
                       "--kind", kind)
        assert done.returncode == 0, done.stderr
        with pytest.raises(ipupod.RecoverableError) as fault:
            session.refresh()
        error = fault.value
        assert isinstance(error, ipupod.Error)
        assert error.recovery_action == action and error.code == grpc.StatusCode.ABORTED
        assert error.kind == "recoverable" and error.type == "ipupodd.recoverable"
        assert ipu in error.ipus and action in str(error)
        if action == "FULL_RESET":
            ipupod_server.client(user="admin").reset_pod()
        else:
            session.reset()
        eventually_healthy(session)


def eventually_healthy(session, attempts=200):
    """A reset keeps the IPUs resetting for a moment (UNAVAILABLE): retry until healthy."""
    for _ in range(attempts):
        try:
            info = session.refresh()
            assert info.needs_load
            return
        except ipupod.Error as error:
            assert error.code == grpc.StatusCode.UNAVAILABLE, error
            time.sleep(0.02)
    pytest.fail("the session stayed unavailable after its reset")


@pytest.mark.ipupod(pod="POD4")
def test_an_unrecoverable_fault_raises_unrecoverable_error(ipupod_server, ipupod_client):
    admin = ipupod_server.client(user="admin")
    with ipupod_client.attach(ipus=1) as session:
        ipu = session.ipus[0]
        with pytest.raises(ipupod.Error) as not_admin:
            ipupod_client.inject_fault(ipu, "unrecoverable")
        assert not_admin.value.code == grpc.StatusCode.PERMISSION_DENIED
        admin.inject_fault(ipu, "unrecoverable")
        with pytest.raises(ipupod.UnrecoverableError) as fault:
            session.refresh()
        assert fault.value.code == grpc.StatusCode.DATA_LOSS
        assert fault.value.kind == "unrecoverable" and ipu in fault.value.ipus
    assert admin.repair_ipu(ipu).ipu.id == ipu
    with pytest.raises(ipupod.Error) as kind:
        admin.inject_fault(0, "meltdown")
    assert "unknown fault kind" in kind.value.message


@pytest.mark.ipupod(pod="POD4")
def test_the_poptorch_error_handling_pattern_works_as_written(ipupod_server, ipupod_client):
    """PopTorch features 4.3's example, with a fault injected as admin."""
    seen = []
    with ipupod_client.attach(ipus=1) as session:
        ipupod_server.client(user="admin").inject_fault(session.ipus[0], "ipu-reset")
        try:
            session.refresh()
        except ipupod.RecoverableError as e:
            print(e)
            if e.recovery_action == "FULL_RESET":
                seen.append("reboot")
            elif e.recovery_action == "IPU_RESET":
                seen.append("Need to reset the IPU")
        except ipupod.UnrecoverableError:
            seen.append("offline")
        except ipupod.Error as e:
            seen.append(f"Received {e.message} from component {e.type}, location: {e.location}")
    assert seen == ["Need to reset the IPU"]


def test_every_documented_kind_and_action_maps_to_its_exception():
    location = "SessionService.GetSession at 127.0.0.1:1"
    for action in ipupod.RECOVERY_ACTIONS:
        trailers = ((errors.KIND_KEY, "recoverable"), (errors.ACTION_KEY, action),
                    (errors.IPUS_KEY, "4,5"))
        error = errors.from_status(grpc.StatusCode.ABORTED, "fault", trailers, location=location)
        assert type(error) is ipupod.RecoverableError and error.recovery_action == action
        assert error.ipus == (4, 5) and error.location == location
    trailers = ((errors.KIND_KEY, "unrecoverable"), (errors.IPUS_KEY, "7"))
    lost = errors.from_status(grpc.StatusCode.DATA_LOSS, "failed", trailers, location=location)
    assert type(lost) is ipupod.UnrecoverableError and lost.ipus == (7,)
    plain = errors.from_status(grpc.StatusCode.ABORTED, "detached", (), location=location)
    assert type(plain) is ipupod.Error and plain.kind == "application"
    application = errors.from_status(grpc.StatusCode.INVALID_ARGUMENT, "bad",
                                     ((errors.KIND_KEY, "application"),), location=location)
    assert type(application) is ipupod.Error and application.type == "ipupodd.application"
    assert str(application) == f"bad (INVALID_ARGUMENT; ipupodd.application; {location})"


def test_transport_failures_are_told_from_server_errors():
    assert errors.is_transport_failure(grpc.StatusCode.UNAVAILABLE,
                                       "failed to connect to all addresses", ())
    # the server's own UNAVAILABLE (shutting down, IPUs resetting) is not the transport's
    assert not errors.is_transport_failure(grpc.StatusCode.UNAVAILABLE,
                                           "ipupodd is shutting down", ())
    assert not errors.is_transport_failure(grpc.StatusCode.UNAVAILABLE, "socket closed",
                                           ((errors.KIND_KEY, "application"),))
    assert not errors.is_transport_failure(grpc.StatusCode.INTERNAL, "connection refused", ())
