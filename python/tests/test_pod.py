"""The pod, partitions and sessions through ipupod.Client against a real ipupodd."""

import threading
import time

import grpc
import pytest

import ipupod


def eventually(predicate, timeout=10.0, what="the condition"):
    """Polls ``predicate`` every 20 ms until true; fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        time.sleep(0.02)


@pytest.mark.ipupod(pod="POD4")
def test_pod_info_describes_the_configured_pod(ipupod_server, ipupod_client):
    info = ipupod_client.pod_info()
    assert info.pod.name == "POD4"
    assert info.pod.num_ipus == 4 and info.pod.free_ipus == 4
    assert info.pod.open_mode
    assert [ipu.id for ipu in info.ipus] == [0, 1, 2, 3]
    assert ipupod_server.address.startswith("127.0.0.1:")


@pytest.mark.ipupod(pod="POD16")
def test_partitions_are_created_listed_and_removed(ipupod_client):
    made = ipupod_client.create_partition("exp1", 4)
    assert made.size == 4 and made.owner == "pytest" and len(made.ipus) == 4
    assert [p.name for p in ipupod_client.list_partitions()] == ["exp1"]
    assert ipupod_client.get_partition("exp1").ipus == made.ipus
    with ipupod_client.attach(ipus=2, partition="exp1") as session:
        assert set(session.ipus) <= set(made.ipus)
        with pytest.raises(ipupod.Error) as busy:
            ipupod_client.remove_partition("exp1")
        assert busy.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert ipupod_client.remove_partition("exp1", force=True) == [session.id]
    assert ipupod_client.list_partitions() == []


def test_partition_errors_keep_their_codes_and_change_nothing(ipupod_server, ipupod_client):
    with pytest.raises(ipupod.Error) as bad:
        ipupod_client.create_partition("p", 3)
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "power of two" in bad.value.message
    assert bad.value.type == "ipupodd.application"
    assert bad.value.location == f"PartitionService.CreatePartition at {ipupod_server.address}"
    ipupod_client.create_partition("p", 2)
    with pytest.raises(ipupod.Error) as taken:
        ipupod_client.create_partition("p", 2)
    assert taken.value.code == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(ipupod.Error) as missing:
        ipupod_client.get_partition("nope")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    other = ipupod_server.client(user="bob")
    with pytest.raises(ipupod.Error) as denied:
        other.remove_partition("p")
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert [p.name for p in ipupod_client.list_partitions()] == ["p"]
    with pytest.raises(ipupod.Error) as size:
        ipupod_client.create_partition("q", -1)
    assert size.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert size.value.type == "client.application"


@pytest.mark.ipupod(pod="POD4")
def test_attach_holds_ipus_until_the_with_block_ends(ipupod_client):
    with ipupod_client.attach(ipus=2, label="test holder") as session:
        assert session.owned and not session.ended and len(session.ipus) == 2
        [listed] = ipupod_client.list_sessions()
        assert listed.session == session.id and listed.user == "pytest"
        assert listed.client == "test holder"
        assert ipupod_client.get_session(session.id).ipus == session.ipus
        assert ipupod_client.pod_info().pod.free_ipus == 2
    # release() detached before returning: the IPUs are free now, not eventually
    assert ipupod_client.pod_info().pod.free_ipus == 4
    assert session.ended and session.end_error.code == grpc.StatusCode.CANCELLED
    assert ipupod_client.list_sessions() == []


@pytest.mark.ipupod(pod="POD4")
def test_attach_without_wait_is_refused_when_nothing_is_free(ipupod_client):
    with ipupod_client.attach(ipus=4):
        with pytest.raises(ipupod.Error) as full:
            ipupod_client.attach(ipus=1)
        assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(ipupod.Error) as bad:
        ipupod_client.attach(ipus=3)
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with ipupod_client.attach(ipus=3, auto_round=True) as rounded:
        assert len(rounded.ipus) == 4


@pytest.mark.ipupod(pod="POD4")
def test_attach_wait_reports_queue_positions_then_grants(ipupod_server, ipupod_client):
    holder = ipupod_client.attach(ipus=4)
    waiter = ipupod_server.client(user="bob")
    positions, granted = [], []

    def wait_for_ipus():
        granted.append(waiter.attach(ipus=2, wait=True, on_position=positions.append))

    thread = threading.Thread(target=wait_for_ipus)
    thread.start()
    eventually(lambda: positions, what="a queue position")
    assert positions[0].position == 1 and positions[0].queue_length == 1
    assert holder.id in positions[0].blocking_sessions
    [entry] = ipupod_client.list_queue()
    assert entry.user == "bob" and entry.num_ipus == 2
    holder.release()
    thread.join(10)
    assert not thread.is_alive() and len(granted[0].ipus) == 2
    granted[0].release()


@pytest.mark.ipupod(pod="POD4")
def test_attach_wait_timeout_leaves_the_queue(ipupod_client):
    with ipupod_client.attach(ipus=4):
        started = time.monotonic()
        with pytest.raises(ipupod.Error) as late:
            ipupod_client.attach(ipus=1, wait=True, wait_timeout=0.5)
        assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 10
        eventually(lambda: not ipupod_client.list_queue(), what="the queue to empty")


@pytest.mark.ipupod(pod="POD4", config={"sharing": {"preempt_grace_seconds": 30}})
def test_a_preemptible_session_gets_the_preemption_notice(ipupod_server, ipupod_client):
    notices = []
    scavenger = ipupod_client.attach(ipus=4, qos="scavenger", on_preempted=notices.append)
    urgent = ipupod_server.client(user="bob")
    granted = []
    thread = threading.Thread(target=lambda: granted.append(urgent.attach(ipus=4, wait=True)))
    thread.start()
    eventually(lambda: scavenger.preempted is not None, what="the preemption notice")
    assert notices == [scavenger.preempted]
    assert scavenger.preempted.session == scavenger.id
    assert scavenger.preempted.by_user == "bob"
    scavenger.release()  # give the IPUs back before the grace runs out
    thread.join(10)
    assert granted and len(granted[0].ipus) == 4
    granted[0].release()


@pytest.mark.ipupod(pod="POD4")
def test_a_session_detached_elsewhere_ends_aborted(ipupod_server, ipupod_client):
    session = ipupod_client.attach(ipus=1)
    admin = ipupod_server.client(user="admin")
    assert admin.detach(session.id) == session.ipus
    eventually(lambda: session.ended, what="the end of the attach stream")
    assert session.end_error.code == grpc.StatusCode.ABORTED
    session.release()  # nothing left to release; no error


@pytest.mark.ipupod(pod="POD4")
def test_a_session_held_elsewhere_is_reachable_by_id(ipupod_client, monkeypatch):
    with ipupod_client.attach(ipus=1) as held:
        monkeypatch.setenv("IPUPOD_SESSION", held.id)
        handle = ipupod_client.session()
        assert handle.id == held.id and not handle.owned
        handle.release()  # does nothing: the holder releases
        assert ipupod_client.get_session(held.id).session == held.id
    with pytest.raises(ipupod.Error) as gone:
        ipupod_client.session(held.id)
    assert gone.value.code == grpc.StatusCode.NOT_FOUND
