"""TLS between ipupod.Client and a real ipupodd, with a PKI made by openssl in the test
(tests/support/make_test_certificates.sh, the script the C++ tests run): a good CA connects, a
wrong one fails with a clear UNAUTHENTICATED error, mutual TLS needs a client certificate, and a
token is never sent in clear text to another machine."""

import os
import subprocess
from pathlib import Path

import grpc
import pytest

import ipupod
from ipupod import transport

TOKENS = {"tokens": [{"token": "s3cret-alice", "user": "alice", "role": "user"}]}
_SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "support" / "make_test_certificates.sh"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The PKI's files by name: ca.pem, server.pem, server.key, other-ca.pem, client.pem, ..."""
    directory = tmp_path_factory.mktemp("pki")
    made = subprocess.run(["sh", str(_SCRIPT), str(directory)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    return {name: str(directory / name) for name in os.listdir(directory)}


def tls_server(factory, pki, mutual=False, **client_tls):
    files = {"cert": pki["server.pem"], "key": pki["server.key"]}
    if mutual:
        files["client_ca"] = pki["ca.pem"]
    return factory(config=TOKENS, tls=files, client_tls=dict(client_tls))


def test_a_good_ca_connects_and_sessions_work(ipupod_server_factory, pki):
    server = tls_server(ipupod_server_factory, pki, tls_ca=pki["ca.pem"])
    alice = server.client(token="s3cret-alice")
    assert "TLS" in repr(alice)
    assert alice.pod_info().pod.num_ipus == 16
    with alice.attach(ipus=2) as session:
        assert alice.get_session(session.id).user == "alice"
        assert len(session.ipus) == 2


def test_a_wrong_ca_fails_with_a_clear_error(ipupod_server_factory, pki):
    server = tls_server(ipupod_server_factory, pki, tls_ca=pki["ca.pem"])
    wrong = ipupod.Client(server=server.address, token="s3cret-alice", tls_ca=pki["other-ca.pem"])
    with pytest.raises(ipupod.Error) as refused:
        wrong.pod_info()
    error = refused.value
    assert error.code == grpc.StatusCode.UNAUTHENTICATED
    assert error.type == "transport.tls"
    assert error.message.startswith(
        f"TLS handshake with {server.address} failed: the server's certificate is not signed by "
        f"the CA in tls_ca '{pki['other-ca.pem']}'"), error.message
    assert "certificate verify failed" in error.details
    with pytest.raises(ipupod.Error) as attach:
        wrong.attach(ipus=1)
    assert attach.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "is not signed by the CA in tls_ca" in attach.value.message
    wrong.close()


def test_plaintext_against_tls_and_tls_against_plaintext(ipupod_server_factory, pki):
    server = tls_server(ipupod_server_factory, pki, tls_ca=pki["ca.pem"])
    with ipupod.Client(server=server.address, token="s3cret-alice", tls_ca="") as plain:
        with pytest.raises(ipupod.Error) as closed:
            plain.pod_info()
    assert closed.value.code == grpc.StatusCode.UNAVAILABLE
    assert "if it serves TLS, pass tls_ca=FILE" in closed.value.message

    plain_server = ipupod_server_factory()
    with ipupod.Client(server=plain_server.address, user="alice", tls_ca=pki["ca.pem"]) as tls:
        with pytest.raises(ipupod.Error) as no_tls:
            tls.pod_info()
    assert no_tls.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "the server does not speak TLS" in no_tls.value.message


def test_mutual_tls_needs_a_client_certificate(ipupod_server_factory, pki):
    server = tls_server(ipupod_server_factory, pki, mutual=True, tls_ca=pki["ca.pem"],
                        tls_cert=pki["client.pem"], tls_key=pki["client.key"])
    assert server.client(token="s3cret-alice").pod_info().pod.num_ipus == 16
    with ipupod.Client(server=server.address, token="s3cret-alice", tls_ca=pki["ca.pem"]) as bare:
        with pytest.raises(ipupod.Error) as refused:
            bare.pod_info()
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    assert "requires a client certificate (mutual TLS)" in refused.value.message


def test_a_token_never_travels_in_clear_text_to_another_machine(monkeypatch, pki):
    monkeypatch.delenv("IPUPOD_TLS_CA", raising=False)
    with pytest.raises(ipupod.Error) as refused:
        ipupod.Client(server="10.255.255.1:1", token="s3cret-alice")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "refusing to send the token to 10.255.255.1:1 in clear text" in refused.value.message
    assert "s3cret" not in refused.value.message
    ipupod.Client(server="10.255.255.1:1", user="alice").close()  # no token: nothing secret
    monkeypatch.setenv("IPUPOD_TLS_CA", pki["ca.pem"])
    client = ipupod.Client(server="10.255.255.1:1", token="s3cret-alice")
    assert client.tls_ca == pki["ca.pem"]
    client.close()


def test_bad_tls_files_are_named_before_connecting(pki):
    def refused(**files):
        with pytest.raises(ipupod.Error) as error:
            ipupod.Client(server="127.0.0.1:1", user="alice", **files)
        return error.value

    missing = refused(tls_ca=pki["ca.pem"] + ".missing")
    assert missing.code == grpc.StatusCode.NOT_FOUND and "does not exist" in missing.message
    key_as_ca = refused(tls_ca=pki["ca.key"])
    assert key_as_ca.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "holds no PEM certificate" in key_as_ca.message
    mismatch = refused(tls_ca=pki["ca.pem"], tls_cert=pki["client.pem"], tls_key=pki["server.key"])
    assert mismatch.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not belong to the certificate" in mismatch.message
    half = refused(tls_ca=pki["ca.pem"], tls_cert=pki["client.pem"], tls_key="")
    assert half.code == grpc.StatusCode.INVALID_ARGUMENT and "only tls_cert" in half.message


def test_loopback_targets_follow_the_cpp_rule():
    for target in ("127.0.0.1:50051", "localhost:1", "[::1]:1", "unix:/run/ipupod.sock",
                   "dns:///localhost:1", "ipv4:127.0.0.1:1,127.0.0.2:1"):
        assert transport.is_loopback_target(target), target
    for target in ("10.255.255.1:1", "pod.example.org:1", "0.0.0.0:1", "[2001:db8::1]:1",
                   "dns:///pod.example.org:1", "ipv4:127.0.0.1:1,10.0.0.1:1",
                   "127.0.0.1.evil.org:1"):
        assert not transport.is_loopback_target(target), target
