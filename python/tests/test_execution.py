"""Executables, weights, inference and training runs against a real ipupodd, checked against
numpy and torch."""

import grpc
import numpy as np
import pytest

import ipupod
from conftest import run_cli, torch_sgd


def mlp_reference(weights, x):
    hidden = np.maximum(x @ weights["0.weight"].T + weights["0.bias"], 0)
    return hidden @ weights["2.weight"].T + weights["2.bias"]


def test_upload_takes_the_stat_fast_path_the_second_time(ipupod_client, mlp):
    first = ipupod_client.upload_executable(mlp.ipx)
    assert not first.cache_hit and first.mode == "inference" and first.ipus_needed == 1
    with open(mlp.ipx, "rb") as file:
        again = ipupod_client.upload_executable(file.read())
    assert again.cache_hit and again.sha256 == first.sha256
    assert ipupod_client.stat_executable(first.sha256).size_bytes == first.size_bytes


def test_upload_refuses_what_is_not_an_executable(ipupod_client, tmp_path):
    with pytest.raises(ipupod.Error) as bad:
        ipupod_client.upload_executable(b"not an ipx at all")
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "ipupod compile" in bad.value.message
    with pytest.raises(ipupod.Error) as missing:
        ipupod_client.upload_executable(str(tmp_path / "nope.ipx"))
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ipupod.Error) as unknown:
        ipupod_client.stat_executable("0" * 64)
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND


def test_inference_equals_numpy_and_torch(ipupod_client, mlp, torch):
    x = np.random.default_rng(0).standard_normal((12, 16)).astype(np.float32)
    with ipupod_client.attach(ipus=1) as session:
        program = session.load(mlp.ipx)
        assert [s.name for s in program.inputs] == ["x"] and program.run_shape.samples_per_step == 4
        steps = []
        outputs = session.infer({"x": x}, on_step=steps.append)
        assert [s.run for s in steps] == [0, 1, 2] and steps[-1].runs == 3
        assert outputs["y"].shape == (12, 4) and outputs["y"].dtype == np.float32
        np.testing.assert_allclose(outputs["y"], mlp_reference(mlp.weights, x), rtol=1e-5,
                                   atol=1e-6)
        with torch.no_grad():
            expected = mlp.module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(outputs["y"], expected, rtol=1e-5, atol=1e-6)
        one = session.run({"x": torch.from_numpy(x[:4])})  # torch tensors go in as they are
        assert one.stats.samples == 4 and one.losses == []
        np.testing.assert_allclose(one.outputs["y"], expected[:4], rtol=1e-5, atol=1e-6)


def test_weights_go_in_and_out_as_numpy_or_torch(ipupod_client, mlp, torch):
    with ipupod_client.attach(ipus=1) as session:
        session.load(mlp.ipx)
        read = session.read_weights()
        assert set(read) == set(mlp.weights)
        for name, value in mlp.weights.items():
            np.testing.assert_array_equal(read[name], value)
        doubled = {name: torch.from_numpy(value * 2) for name, value in mlp.weights.items()}
        written = session.write_weights(doubled)
        assert sorted(written.written) == sorted(mlp.weights)
        back = session.read_weights(["2.bias"], as_torch=True)
        assert isinstance(back["2.bias"], torch.Tensor)
        np.testing.assert_array_equal(back["2.bias"].numpy(), mlp.weights["2.bias"] * 2)
        x = np.ones((4, 16), np.float64)  # float64 is narrowed to float32
        y = session.run({"x": x}).outputs["y"]
        twice = {k: v * 2 for k, v in mlp.weights.items()}
        np.testing.assert_allclose(y, mlp_reference(twice, x.astype(np.float32)), rtol=1e-5)


def test_bad_inputs_and_weights_are_refused_and_change_nothing(ipupod_client, mlp):
    with ipupod_client.attach(ipus=1) as session:
        session.load(mlp.ipx)
        cases = [
            ({"x": np.zeros((4, 15), np.float32)}, "takes float32[N, 16]"),
            ({"x": np.zeros((6, 16), np.float32)}, "not a positive multiple of the 4"),
            ({"z": np.zeros((4, 16), np.float32)}, "not an input of the model"),
            ({"x": np.zeros((4, 16), np.float16)}, "is float16[4, 16] but the model takes float32"),
            ({"x": np.zeros((4, 16), np.uint8)}, "uint8, which ipupod does not carry"),
        ]
        for inputs, words in cases:
            with pytest.raises(ipupod.Error) as bad:
                session.infer(inputs)
            assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and words in bad.value.message
        with pytest.raises(ipupod.Error) as server_side:
            session.run({"x": np.zeros((3, 16), np.float32)})
        assert server_side.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert server_side.value.type == "ipupodd.application"
        with pytest.raises(ipupod.Error) as unknown:
            session.write_weights({"2.bias": np.zeros(4, np.float32),
                                   "nope": np.zeros(1, np.float32)})
        assert unknown.value.code == grpc.StatusCode.INVALID_ARGUMENT
        np.testing.assert_array_equal(session.read_weights(["2.bias"])["2.bias"],
                                      mlp.weights["2.bias"])  # all or nothing


def test_nothing_loaded_and_another_users_session(ipupod_server, ipupod_client, mlp):
    with ipupod_client.attach(ipus=1) as session:
        with pytest.raises(ipupod.Error) as empty:
            session.run({"x": np.zeros((4, 16), np.float32)})
        assert empty.value.code == grpc.StatusCode.FAILED_PRECONDITION
        mallory = ipupod_server.client(user="mallory")
        with pytest.raises(ipupod.Error) as hidden:
            mallory.session(session.id)
        assert hidden.value.code == grpc.StatusCode.PERMISSION_DENIED
        stranger = ipupod.Session(mallory, session.info)  # a handle made by hand
        with pytest.raises(ipupod.Error) as denied:
            stranger.load(mlp.ipx)
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_training_equals_torch_sgd(ipupod_client, linear_mse, torch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 10)).astype(np.float32)
    target = rng.standard_normal((16, 10)).astype(np.float32)
    with ipupod_client.attach(ipus=1) as session:
        program = session.load(linear_mse.ipx)
        assert program.training.optimizer.name == "sgd"
        runs = []
        result = session.train({"x": x, "target": target}, steps=20, lr=0.05, on_run=runs.append)
        assert result.runs == 10 and len(runs) == 10 and result.recoveries == 0
        expected_losses, expected = torch_sgd(torch, linear_mse, x, target, updates=20, batch=4,
                                              lr=0.05)
        np.testing.assert_allclose(result.losses, expected_losses, rtol=1e-4, atol=1e-6)
        weights = session.read_weights()
        for name, value in expected.items():
            np.testing.assert_allclose(weights[name], value, rtol=1e-4, atol=1e-6)


def test_a_checkpoint_resumes_training_exactly_in_another_session(ipupod_client, linear_mse):
    rng = np.random.default_rng(2)
    data = {"x": rng.standard_normal((16, 10)).astype(np.float32),
            "target": rng.standard_normal((16, 10)).astype(np.float32)}
    with ipupod_client.attach(ipus=1) as whole:
        whole.load(linear_mse.ipx)
        straight = whole.train(data, steps=12)
        final = whole.read_weights()
    with ipupod_client.attach(ipus=1) as first:
        first.load(linear_mse.ipx)
        half = first.train(data, steps=6, checkpoint_every=1)
        checkpoint = half.checkpoint
    assert int(checkpoint["optimizer/step"]) == 6
    with ipupod_client.attach(ipus=1) as second:
        second.load(linear_mse.ipx)
        rest = second.train(data, steps=6, resume=checkpoint)
        resumed = second.read_weights()
    assert half.losses + rest.losses == straight.losses
    for name, value in final.items():
        np.testing.assert_array_equal(resumed[name], value)


def test_set_optimizer_and_its_errors(ipupod_client, linear_mse, mlp):
    with ipupod_client.attach(ipus=1) as session:
        session.load(linear_mse.ipx)
        assert session.set_optimizer(lr=0.5).variables["lr"] == 0.5
        with pytest.raises(ipupod.Error) as constant:
            session.set_optimizer(momentum=0.9)
        assert constant.value.code == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(ipupod.Error) as how_long:
            session.train({"x": np.zeros((8, 10), np.float32),
                           "target": np.zeros((8, 10), np.float32)}, steps=3)
        assert "multiple of device_iterations" in how_long.value.message
        session.load(mlp.ipx)
        with pytest.raises(ipupod.Error) as inference:
            session.train({"x": np.zeros((4, 16), np.float32)}, epochs=1)
        assert inference.value.code == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.ipupod(pod="POD4", config={"reset_ms": {"ipu": 20, "partition": 20, "pod": 20}})
@pytest.mark.parametrize("kind", ["ipu-reset", "partition-reset"])
def test_training_recovers_from_an_injected_fault(ipupod_server, ipupod_client, linear_mse,
                                                  torch, kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 10)).astype(np.float32)
    target = rng.standard_normal((16, 10)).astype(np.float32)
    with ipupod_client.attach(ipus=1) as session:
        session.load(linear_mse.ipx)

        def inject_once(progress):
            if progress.run == 2:  # the fault surfaces on the session's next operation
                done = run_cli(ipupod_server.address, "admin", "fault", "inject", "--ipu",
                               str(session.ipus[0]), "--kind", kind)
                assert done.returncode == 0, done.stderr

        result = session.train({"x": x, "target": target}, steps=16, lr=0.05, recover=True,
                               on_run=inject_once)
        assert result.recoveries == 1
        expected_losses, expected = torch_sgd(torch, linear_mse, x, target, updates=16, batch=4,
                                              lr=0.05)
        np.testing.assert_allclose(result.losses, expected_losses, rtol=1e-4, atol=1e-6)
        weights = session.read_weights()
        for name, value in expected.items():
            np.testing.assert_allclose(weights[name], value, rtol=1e-4, atol=1e-6)


@pytest.mark.ipupod(pod="POD4")
def test_training_without_recover_raises_the_fault(ipupod_server, ipupod_client, linear_mse):
    with ipupod_client.attach(ipus=1) as session:
        session.load(linear_mse.ipx)
        admin = ipupod_server.client(user="admin")
        admin.inject_fault(session.ipus[0], "link-reset")
        with pytest.raises(ipupod.RecoverableError) as fault:
            session.train({"x": np.zeros((8, 10), np.float32),
                           "target": np.zeros((8, 10), np.float32)}, steps=2)
        assert fault.value.recovery_action == "LINK_RESET"


@pytest.mark.ipupod(pod="POD4", config={"reset_ms": {"ipu": 20, "partition": 20, "pod": 20}})
def test_training_gives_up_after_max_recoveries(ipupod_server, ipupod_client, linear_mse):
    admin = ipupod_server.client(user="admin")
    data = {"x": np.zeros((8, 10), np.float32), "target": np.ones((8, 10), np.float32)}
    with ipupod_client.attach(ipus=1) as session:
        session.load(linear_mse.ipx)

        def fault_after_every_run(progress):
            admin.inject_fault(session.ipus[0], "ipu-reset")

        with pytest.raises(ipupod.RecoverableError) as gave_up:
            session.train(data, steps=16, recover=True, max_recoveries=2,
                          on_run=fault_after_every_run)
        assert "gave up after 2 recoveries" in gave_up.value.message
        assert gave_up.value.recovery_action == "IPU_RESET"
