"""The audit log through ipupod.Client.audit against a real ipupodd: what an admin and a
refused user did, page by page, filtered; readable by admins only."""

import time

import grpc
import pytest

import ipupod
from ipupod.audit import ACTIONS


@pytest.mark.ipupod(pod="POD4")
def test_admins_read_who_did_what_with_its_result(ipupod_server):
    admin = ipupod_server.client(user="admin")
    bob = ipupod_server.client(user="bob")
    with pytest.raises(ipupod.Error) as refused:
        bob.inject_fault(1, "ipu-reset")
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    admin.inject_fault(2, "ipu-reset")
    admin.reset_ipu(2)

    records = admin.audit()
    assert [r.action for r in records] == ["server.start", "fault.inject", "fault.inject",
                                           "ipu.reset"]
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    start, by_bob, by_admin, reset = records
    assert start.user == "ipupodd" and start.code == "OK" and start.peer == ""
    assert (by_bob.user, by_bob.admin, by_bob.target, by_bob.code) == (
        "bob", False, "ipu 1", "PERMISSION_DENIED")
    assert by_bob.message and by_bob.peer.startswith(("ipv4:127.0.0.1:", "ipv6:"))
    assert by_admin.admin and by_admin.code == "OK" and by_admin.message == ""
    assert "kind=ipu-reset" in by_admin.details
    assert reset.target == "ipu 2" and "ipus=2" in reset.details and reset.code == "OK"
    assert abs(reset.time_unix_ms / 1000 - time.time()) < 60

    assert [r.seq for r in admin.audit(action="fault.inject")] == [by_bob.seq, by_admin.seq]
    assert [r.seq for r in admin.audit(user="bob")] == [by_bob.seq]
    assert admin.audit(since=time.time() + 3600) == []


@pytest.mark.ipupod(pod="POD4")
def test_reads_go_page_by_page_to_the_limit(ipupod_server):
    admin = ipupod_server.client(user="admin")
    for ipu in range(4):
        admin.inject_fault(ipu, "ipu-reset")
    first = admin.audit(limit=3)
    assert len(first) == 3
    rest = admin.audit(page_token=str(first[-1].seq))
    assert [r.seq for r in first + rest] == [r.seq for r in admin.audit(limit=1000)]
    assert len(first + rest) == 5  # server.start and four faults


@pytest.mark.ipupod(pod="POD4")
def test_only_admins_may_read_it_and_bad_values_are_refused(ipupod_server, ipupod_client):
    with pytest.raises(ipupod.Error) as denied:
        ipupod_client.audit()
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "admins only" in denied.value.message
    admin = ipupod_server.client(user="admin")
    for bad in ({"limit": 0}, {"limit": 100001}, {"action": "pod.rest"}, {"since": -1}):
        with pytest.raises(ipupod.Error) as refused:
            admin.audit(**bad)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT, bad
    with pytest.raises(ipupod.Error) as empty:
        admin.audit(since=2000, until=1000)
    assert empty.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "window is empty" in empty.value.message
    with pytest.raises(ipupod.Error) as token:
        admin.audit(page_token="x")
    assert token.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "page token" in token.value.message
    assert "pod.reset" in ACTIONS and len(ACTIONS) == 12
