#!/usr/bin/python3
"""The overhead of one small inference step through the Python client (issues 14 and 17).

One ipupodd (started with ipupod.testing.LocalServer, one compute thread, warn-level logs)
serves a 10x10 Linear (MatMul + Add) compiled with the build's `ipupod compile`, at batch 1:
one sample per step, so a step is almost all overhead. In the same run, rounds alternate
between:

  python client   Session.run({"x": x}) - ipupod's Python client, one step (RunInline:
                  one unary call)
  python stream   the same with client.inline_steps = False: the Run stream
  inline stubs    RunInline through the generated stub, no ipupod code around it
  inline bytes    RunInline with its request serialized once before the rounds and its
                  response left unparsed: the call and the server, no Python work per step
  stream stubs    the Run stream through the generated stub, no ipupod code around it
  C++ client      build/tools/bench/step_bench: client::Client::Run, one step (its own process,
                  its own session on the same server; RunInline)
  bare unary      a bare Python gRPC unary round trip to the same server:
                  grpc.health.v1.Health/Check with raw bytes (no protobuf, no ipupod code)

Each row prints the median of the rounds' medians (microseconds per call) beside its
references; the goal (issue 17) is the python client at most 1.5x the bare unary. Not a CI stage; run after `bash deploy/build.sh`:

  PYTHONPATH=build/python /usr/bin/python3 tools/bench/python_client_bench.py [--steps N] [--rounds R]

Needs python3-onnx to write the model. Figures: docs/benchmarks.md.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ipupod
from ipupod._proto import execution_pb2
from ipupod.testing import LocalServer, find_binary


def write_model(path):
    """y = x W + b with x float32[1, 10] (onnx.helper; seeded weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((10, 10)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear10", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)


def timed(call, count):
    """Microseconds of each of ``count`` calls."""
    out = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def interleaved(calls, count):
    """Microseconds of ``count`` calls of each of ``calls`` (name -> callable), taking turns."""
    out = {name: [] for name in calls}
    for _ in range(count):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            out[name].append((time.perf_counter() - start) * 1e6)
    return out


def raw_run(stub, session, x, metadata):
    """One Run through the generated stub only: session, header, data; outputs drained."""
    def requests():
        yield execution_pb2.RunRequest(session=session)
        yield execution_pb2.RunRequest(header=execution_pb2.TensorHeader(
            name="x", dtype="float32", shape=[1, 10], total_bytes=40))
        yield execution_pb2.RunRequest(data=execution_pb2.TensorData(data=x.tobytes()))
    for _ in stub.Run(requests(), metadata=metadata, timeout=60):
        pass


def raw_run_inline(stub, session, x, metadata):
    """One RunInline through the generated stub only: the request with x inline."""
    header = execution_pb2.TensorHeader(name="x", dtype="float32", shape=[1, 10], total_bytes=40)
    request = execution_pb2.RunInlineRequest(
        session=session, inputs=[execution_pb2.InlineTensor(header=header, data=x.tobytes())])
    stub.RunInline(request, metadata=metadata, timeout=60)


def cpp_round(address, ipx, steps):
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(ipupod.__file__))))
    binary = os.environ.get("IPUPOD_STEP_BENCH") or os.path.join(build, "tools", "bench", "step_bench")
    done = subprocess.run([binary, address, ipx, str(steps)], capture_output=True, text=True,
                          timeout=600, check=True)
    fields = dict(part.split("=") for part in done.stdout.split()[1:])
    return float(fields["median"])


def measure(server, ipx, steps, rounds):
    client = server.client(user="bench-py")
    stream_client = server.client(user="bench-py")
    stream_client.inline_steps = False
    rows = {"python client": [], "python stream": [], "inline stubs": [], "inline bytes": [],
            "stream stubs": [], "C++ client": [], "bare unary": []}
    x = np.full((1, 10), 0.5, np.float32)
    # The rows below the package go through the client's own channel, stubs and identity
    # (ipupod.calls.Calls), so only the package's code around the call differs.
    calls = client.calls
    channel, metadata = calls.connection.channel, calls.connection.metadata
    health = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None,
                                 response_deserializer=None)
    with client.attach(ipus=1) as session:
        session.load(ipx)
        streamed = stream_client.session(session.id)
        expected = session.run({"x": x}).outputs["y"]
        assert np.array_equal(streamed.run({"x": x}).outputs["y"], expected)
        raw_run(calls.execution, session.id, x, metadata)
        timed(lambda: session.run({"x": x}), 20)  # warm-up
        inline_bytes = channel.unary_unary("/ipupod.v1.ExecutionService/RunInline",
                                           request_serializer=None, response_deserializer=None)
        encoded = execution_pb2.RunInlineRequest(session=session.id, inputs=[
            execution_pb2.InlineTensor(header=execution_pb2.TensorHeader(
                name="x", dtype="float32", shape=[1, 10], total_bytes=40), data=x.tobytes())
        ]).SerializeToString()
        assert (execution_pb2.RunInlineResponse.FromString(inline_bytes(encoded, timeout=60,
                metadata=metadata)).outputs[0].data == expected.tobytes())
        unary = {
            "python client": lambda: session.run({"x": x}),
            "inline stubs": lambda: raw_run_inline(calls.execution, session.id, x, metadata),
            "inline bytes": lambda: inline_bytes(encoded, timeout=60, metadata=metadata),
            "bare unary": lambda: health(b"", timeout=10),
        }
        streams = {
            "python stream": lambda: streamed.run({"x": x}),
            "stream stubs": lambda: raw_run(calls.execution, session.id, x, metadata),
        }
        for _ in range(rounds):
            # The unary rows take turns call by call, so load from elsewhere (or the C++
            # round's process just before) falls on each alike. The stream rows run in blocks
            # of their own: grpcio's per-stream threads would slow the unary calls after them.
            for name, values in interleaved(unary, steps).items():
                rows[name].append(statistics.median(values))
            for name, call in streams.items():
                rows[name].append(statistics.median(timed(call, steps)))
            rows["C++ client"].append(cpp_round(server.address, ipx, steps))
        assert np.array_equal(session.run({"x": x}).outputs["y"], expected)
    return rows


def report(rows, steps, rounds):
    load = os.getloadavg()
    print(f"python_client_bench: 10x10 Linear, batch 1, {steps} steps x {rounds} rounds; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    med = {name: statistics.median(values) for name, values in rows.items()}
    print(f"{'row':<16} {'median us/call':>15}  {'vs C++ client':>14}  {'vs bare unary':>14}  "
          f"rounds")
    for name, value in med.items():
        per_round = ", ".join(f"{v:.0f}" for v in rows[name])
        print(f"{name:<16} {value:>15.1f}  {value / med['C++ client']:>13.2f}x  "
              f"{value / med['bare unary']:>13.2f}x  {per_round}")
    print(f"Python client overhead over the C++ client: "
          f"{med['python client'] - med['C++ client']:.0f} us per step; over the generated "
          f"stubs: {med['python client'] - med['inline stubs']:.0f} us; over the call alone "
          f"(inline bytes): {med['python client'] - med['inline bytes']:.0f} us; python client "
          f"/ bare unary {med['python client'] / med['bare unary']:.2f}x (goal <= 1.5x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="timed calls per row and round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ipupod-python-bench-") as work:
        onnx_path = os.path.join(work, "linear10.onnx")
        ipx = os.path.join(work, "linear10.ipx")
        write_model(onnx_path)
        subprocess.run([find_binary("ipupod", "IPUPOD_CLI_BINARY"), "compile", onnx_path, "-o",
                        ipx], check=True, capture_output=True, timeout=120)
        flags = ["--compute-threads", "1", "--log-level", "warn"]
        with LocalServer(pod="POD4", args=flags) as server:
            rows = measure(server, ipx, args.steps, args.rounds)
    report(rows, args.steps, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
