"""Batch jobs end to end through ipupod.Client against a real ipupodd."""

import os
import threading
import time

import grpc
import numpy as np
import pytest

import ipupod
from conftest import torch_sgd
from test_execution import mlp_reference

JobState = ipupod.JobState


def test_an_inference_job_runs_and_its_results_are_fetched(ipupod_client, mlp, tmp_path):
    x = np.random.default_rng(4).standard_normal((8, 16)).astype(np.float32)
    [job] = ipupod_client.submit(mlp.ipx, {"x": x}, name="mlp-eval")
    assert job.name == "mlp-eval" and job.user == "pytest"
    events = []
    done = ipupod_client.wait_job(job.id, timeout=120, on_event=events.append)
    assert JobState(done.state) == JobState.COMPLETED, done.reason
    states = [JobState(e.state).name for e in events if e.kind == "state"]
    assert states[-1] == "COMPLETED" and "RUNNING" in states
    assert [e.seq for e in events] == sorted({e.seq for e in events})  # each event once
    paths = ipupod_client.fetch_results(job.id, tmp_path / "results")
    assert sorted(paths) == sorted(r.name for r in done.results)
    with np.load(paths["outputs.npz"]) as saved:
        np.testing.assert_allclose(saved["y"], mlp_reference(mlp.weights, x), rtol=1e-5,
                                   atol=1e-6)
    in_memory = ipupod_client.job_tensors(job.id)
    np.testing.assert_array_equal(in_memory["y"], np.load(paths["outputs.npz"])["y"])
    # the same arrays make the same blob: stored once
    assert ipupod_client.put_blob({"x": x}).already_stored
    assert ipupod_client.fetch_results(job.id, tmp_path / "results") == paths


def test_a_training_job_equals_torch_sgd(ipupod_client, linear_mse, torch, tmp_path):
    rng = np.random.default_rng(5)
    data = {"x": rng.standard_normal((16, 10)).astype(np.float32),
            "target": rng.standard_normal((16, 10)).astype(np.float32)}
    np.savez(tmp_path / "data.npz", **data)
    [job] = ipupod_client.submit(linear_mse.ipx, str(tmp_path / "data.npz"), train=True,
                                 steps=12, lr=0.05)
    assert job.name == "linear_mse.ipx"
    losses = []
    done = ipupod_client.wait_job(
        job.id, timeout=120, on_event=lambda e: losses.extend(e.losses) if e.kind == "run" else 0)
    assert JobState(done.state) == JobState.COMPLETED, done.reason
    expected_losses, expected = torch_sgd(torch, linear_mse, data["x"], data["target"],
                                          updates=12, batch=4, lr=0.05)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-4, atol=1e-6)
    weights = ipupod_client.job_tensors(job.id, "weights.npz")
    for name, value in expected.items():
        np.testing.assert_allclose(weights[name], value, rtol=1e-4, atol=1e-6)


@pytest.mark.ipupod(pod="POD4")
def test_hold_release_cancel_list_and_delete(ipupod_client, mlp):
    x = {"x": np.zeros((4, 16), np.float32)}
    with ipupod_client.attach(ipus=4):  # nothing free: the jobs stay PENDING
        [first] = ipupod_client.submit(mlp.ipx, x)
        [second] = ipupod_client.submit(mlp.ipx, x, after=first.id)
        held = ipupod_client.hold_job(first.id)
        assert JobState(held.state) == JobState.PENDING and held.reason == "Held"
        assert ipupod_client.get_job(second.id).reason == "Dependency"
        assert ipupod_client.release_job(first.id).reason != "Held"
        pending = ipupod_client.list_jobs(states=["pending"])
        assert {j.id for j in pending} == {first.id, second.id}
        with pytest.raises(ipupod.Error) as early:
            ipupod_client.wait_job(first.id, timeout=0.3)
        assert early.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        with pytest.raises(ipupod.Error) as not_yet:
            ipupod_client.fetch_results(first.id, "unused")
        assert not_yet.value.code == grpc.StatusCode.FAILED_PRECONDITION
        cancelled = ipupod_client.cancel_job(first.id)
        assert JobState(cancelled.state) == JobState.CANCELLED
    dependent = ipupod_client.wait_job(second.id, timeout=60)
    assert JobState(dependent.state) == JobState.CANCELLED  # its --after job did not complete
    assert ipupod_client.list_jobs() == []
    assert {j.id for j in ipupod_client.list_jobs(all=True)} == {first.id, second.id}
    assert ipupod_client.delete_job(first.id) >= 0
    with pytest.raises(ipupod.Error) as gone:
        ipupod_client.get_job(first.id)
    assert gone.value.code == grpc.StatusCode.NOT_FOUND


def test_a_job_carries_its_account_and_qos(ipupod_client, mlp):
    x = {"x": np.zeros((4, 16), np.float32)}
    [job] = ipupod_client.submit(mlp.ipx, x, qos="scavenger")
    assert job.qos == "scavenger" and job.account == "pytest"  # resolved: its own account
    done = ipupod_client.wait_job(job.id, timeout=120)
    assert JobState(done.state) == JobState.COMPLETED, done.reason
    for bad in (dict(qos="gold"), dict(account="nobody")):
        with pytest.raises(ipupod.Error) as refused:
            ipupod_client.submit(mlp.ipx, x, **bad)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT, refused.value


def test_bad_submissions_are_refused_before_or_by_the_server(ipupod_client, mlp, linear_mse,
                                                             tmp_path):
    x = {"x": np.zeros((4, 16), np.float32)}
    local = [
        dict(executable=linear_mse.ipx, inputs=x, train=True),  # neither epochs nor steps
        dict(executable=mlp.ipx, inputs=x, epochs=2),  # training flags without train
        dict(executable=mlp.ipx, inputs=str(tmp_path / "missing.npz")),
        dict(executable=mlp.ipx, inputs=x, colour="blue"),  # no such JobSpec field
        dict(executable=b"not an executable", inputs=x),
    ]
    for arguments in local:
        with pytest.raises(ipupod.Error) as refused:
            ipupod_client.submit(**arguments)
        assert refused.value.type == "client.application", refused.value
    with pytest.raises(ipupod.Error) as shape:
        ipupod_client.submit(mlp.ipx, {"x": np.zeros((4, 15), np.float32)})
    assert shape.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert shape.value.type == "ipupodd.application"
    with pytest.raises(ipupod.Error) as unknown:
        ipupod_client.get_job("4242")
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND
    assert ipupod_client.list_jobs(all=True) == []


def test_a_dropped_download_resumes_and_corrupt_bytes_are_refused(ipupod_client, mlp, tmp_path):
    x = np.random.default_rng(6).standard_normal((16, 16)).astype(np.float32)
    [job] = ipupod_client.submit(mlp.ipx, {"x": x})
    done = ipupod_client.wait_job(job.id, timeout=120)
    result = next(r for r in done.results if r.name == "outputs.npz")
    whole = tmp_path / "whole"
    ipupod_client.fetch_results(job.id, whole)
    data = (whole / "outputs.npz").read_bytes()
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "outputs.npz.part").write_bytes(data[:100])  # what a dropped transfer left
    progress = []
    ipupod_client.fetch_results(job.id, resumed, on_progress=lambda *p: progress.append(p))
    assert (resumed / "outputs.npz").read_bytes() == data
    assert ("outputs.npz", result.size_bytes, result.size_bytes) in progress
    assert all(done_bytes > 100 for name, done_bytes, _ in progress if name == "outputs.npz")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "outputs.npz.part").write_bytes(b"\0" * 100)
    with pytest.raises(ipupod.Error) as bad:
        ipupod_client.fetch_results(job.id, corrupt)
    assert bad.value.code == grpc.StatusCode.DATA_LOSS
    assert not os.path.exists(corrupt / "outputs.npz.part")
    assert not os.path.exists(corrupt / "outputs.npz")


@pytest.mark.ipupod(pod="POD4")
def test_wait_job_rides_out_a_server_restart(ipupod_server, ipupod_client, mlp):
    holder = ipupod_client.attach(ipus=4)  # the job waits in the queue
    [job] = ipupod_client.submit(mlp.ipx, {"x": np.ones((4, 16), np.float32)})
    waited, events = [], []
    thread = threading.Thread(
        target=lambda: waited.append(ipupod_client.wait_job(job.id, on_event=events.append)))
    thread.start()
    deadline = time.monotonic() + 10
    while not events and time.monotonic() < deadline:  # the waiter follows the job's events
        time.sleep(0.02)
    assert events, "wait_job never started following the job"
    ipupod_server.kill()  # SIGKILL: the session goes, the job stays PENDING on disk
    holder.release()
    ipupod_server.start()  # same port, same state
    thread.join(60)
    assert not thread.is_alive(), "wait_job did not come back after the restart"
    assert JobState(waited[0].state) == JobState.COMPLETED, waited[0].reason


@pytest.mark.ipupod(pod="POD4")
def test_waits_hold_no_call_slot_of_anyone(ipupod_server, ipupod_client, mlp):
    """Issue 29: more wait_job() calls than JobService admits calls (16, and 4 per user) leave
    every user's submits, listings and get_job served; the waits go on."""
    holder = ipupod_client.attach(ipus=4)  # the jobs wait in the queue
    x = {"x": np.ones((4, 16), np.float32)}
    waiters, events = [], {}
    for user in ("alice", "bob", "dave"):
        client = ipupod_server.client(user=user)
        [job] = client.submit(mlp.ipx, x)
        for i in range(6):
            seen = events.setdefault((user, i), [])
            thread = threading.Thread(
                target=client.wait_job, args=(job.id,),
                kwargs=dict(timeout=60, on_event=seen.append), daemon=True)
            thread.start()
            waiters.append(thread)
    deadline = time.monotonic() + 20
    while not all(events.values()) and time.monotonic() < deadline:  # every wait follows
        time.sleep(0.02)
    assert all(events.values()), "some wait_job never started following its job"
    for user in ("alice", "erin", "admin"):
        client = ipupod_server.client(user=user)
        [job] = client.submit(mlp.ipx, x)
        assert client.get_job(job.id).id == job.id
        assert job.id in {j.id for j in client.list_jobs()}
    assert all(thread.is_alive() for thread in waiters)
    holder.release()
    for thread in waiters:
        thread.join(60)
    assert not any(thread.is_alive() for thread in waiters)


def test_another_users_fetch_is_denied_as_its_other_details_are(ipupod_server, ipupod_client,
                                                                 mlp, tmp_path):
    """Issue 29: a completed job of another user is not "without results": its details are
    hidden, and fetching them is PERMISSION_DENIED, as every request for them is."""
    [job] = ipupod_client.submit(mlp.ipx, {"x": np.ones((4, 16), np.float32)})
    assert JobState(ipupod_client.wait_job(job.id, timeout=120).state) == JobState.COMPLETED
    other = ipupod_server.client(user="mallory")
    seen = other.get_job(job.id)
    assert seen.details_hidden and not ipupod_client.get_job(job.id).details_hidden
    with pytest.raises(ipupod.Error) as denied:
        other.fetch_results(job.id, tmp_path / "stolen")
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED, denied.value
    with pytest.raises(ipupod.Error) as events:
        list(other.job_events(job.id))
    assert events.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert not (tmp_path / "stolen").exists()
