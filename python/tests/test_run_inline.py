"""RunInline: Session.run sends a small step as one unary call (no stream) and a large one
through the Run stream; the results, errors and run counts are the stream's. The server's RPC
metrics say which method ran."""

import os
import re
import urllib.request

import grpc
import numpy as np
import pytest

import ipupod
from conftest import compile_model


def _linear(model_dir, rows, cols):
    """y = x W + b, x float32[rows, 8], W [8, cols]: outputs of rows x cols floats."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(rows * 7 + cols)
    w = numpy_helper.from_array(rng.standard_normal((8, cols)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(cols).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])], [w, b])
    path = os.path.join(model_dir, f"linear_{rows}x{cols}.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    ipx = path[:-len(".onnx")] + ".ipx"
    compile_model(path, ipx, [])
    return ipx


@pytest.fixture(scope="module")
def small(model_dir):
    return _linear(model_dir, 1, 10)


@pytest.fixture(scope="module")
def wide(model_dir):
    return _linear(model_dir, 64, 4200)  # 1,075,200 bytes of outputs: over RunInline's 1 MiB


def calls(server, method, code="OK"):
    """ExecutionService calls of ``method`` that ended ``code``, from the server's metrics."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    series = (f'ipupod_rpcs_total{{code="{code}",method="{method}",'
              f'service="ipupod.v1.ExecutionService"}} ')
    match = re.search("^" + re.escape(series) + r"(\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_run_takes_run_inline_and_equals_the_stream(ipupod_server, small):
    inline_client = ipupod_server.client(user="alice")
    stream_client = ipupod_server.client(user="alice")
    stream_client.inline_steps = False
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    with inline_client.attach(ipus=1) as session:
        session.load(small)
        first = session.run({"x": x})
        streamed = stream_client.session(session.id).run({"x": x})
        explicit = session.run_inline({"x": x})
        assert calls(ipupod_server, "RunInline") == 2 and calls(ipupod_server, "Run") == 1
        np.testing.assert_array_equal(first.outputs["y"], streamed.outputs["y"])
        np.testing.assert_array_equal(explicit.outputs["y"], streamed.outputs["y"])
        assert first.outputs["y"].dtype == np.float32 and first.outputs["y"].shape == (1, 10)
        assert [first.stats.run_index, streamed.stats.run_index,
                explicit.stats.run_index] == [1, 2, 3]
        assert first.stats.samples == streamed.stats.samples == 1
        assert session.get_loaded().runs == 3


def test_bad_inputs_fail_as_on_the_stream_and_run_nothing(ipupod_server, small):
    client = ipupod_server.client(user="alice")
    stream_client = ipupod_server.client(user="alice")
    stream_client.inline_steps = False
    cases = [
        {"x": np.ones((2, 8), np.float32)},  # shape
        {"x": np.ones((1, 8), np.int32)},    # dtype the program does not take
        {"z": np.ones((1, 8), np.float32)},  # name
    ]
    with client.attach(ipus=1) as session:
        session.load(small)
        for inputs in cases:
            with pytest.raises(ipupod.Error) as inline_error:
                session.run(inputs)
            with pytest.raises(ipupod.Error) as stream_error:
                stream_client.session(session.id).run(inputs)
            assert inline_error.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert inline_error.value.code == stream_error.value.code
            assert inline_error.value.details == stream_error.value.details
        with pytest.raises(ipupod.Error) as complex_input:  # refused before anything is sent
            session.run({"x": np.ones((1, 8), np.complex64)})
        assert complex_input.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert calls(ipupod_server, "RunInline", "INVALID_ARGUMENT") == 3
        assert session.get_loaded().runs == 0


def test_over_size_steps_are_refused_inline_and_run_through_the_stream(ipupod_server, small,
                                                                       wide):
    client = ipupod_server.client(user="alice")
    with client.attach(ipus=1) as session:
        session.load(small)
        with pytest.raises(ipupod.Error) as too_big:  # 1 MiB + 4 bytes of inputs
            session.run_inline({"x": np.ones((1 << 18) + 1, np.float32)})
        assert too_big.value.code == grpc.StatusCode.OUT_OF_RANGE
        assert "send it through Run" in too_big.value.details
        session.load(wide)
        x = np.ones((64, 8), np.float32)
        with pytest.raises(ipupod.Error) as outputs:
            session.run_inline({"x": x})
        assert outputs.value.code == grpc.StatusCode.OUT_OF_RANGE
        assert "bytes of outputs" in outputs.value.details
        assert session.get_loaded().runs == 0
        first = session.run({"x": x})   # refused inline, then the stream
        second = session.run({"x": x})  # the stream straight away
        np.testing.assert_array_equal(first.outputs["y"], second.outputs["y"])
        assert first.outputs["y"].shape == (64, 4200)
        assert calls(ipupod_server, "RunInline", "OUT_OF_RANGE") == 3
        assert calls(ipupod_server, "Run") == 2
        assert session.get_loaded().runs == 2
