#!/usr/bin/python3
"""Writes the seed corpus of every fuzz target into tools/fuzz/corpus/TARGET/.

    /usr/bin/python3 tools/fuzz/make_corpus.py BUILD_DIR

Seeds are real files: .npz/.npy written by numpy, .safetensors in the
format's layout, ONNX models built with onnx.helper, .ipx compiled from them
by BUILD_DIR/client/ipupod (any ordinary build), the IPUConfig files of
tests/device/compiler/testdata, the server config of docs/configuration.md, and
tensor streams framed as tools/fuzz/tensor_stream_fuzzer.cc reads them.
"""
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tools", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def arrays():
    rng = np.random.default_rng(11)
    return {
        "w": rng.standard_normal((3, 4)).astype(np.float32),
        "ids": np.array([7, -8, 1 << 40], dtype=np.int64),
        "count": np.array([-3], dtype=np.int32),
        "mask": np.array([[True, False], [False, True]]),
        "scale": np.float32(0.25),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def npz_and_npy():
    for name, save in (("stored.npz", np.savez), ("deflated.npz", np.savez_compressed)):
        buf = io.BytesIO()
        save(buf, **arrays())
        put("fuzz_npz", name, buf.getvalue())
    zeros = io.BytesIO()
    np.savez_compressed(zeros, z=np.zeros((64, 64), dtype=np.float32))
    put("fuzz_npz", "zeros.npz", zeros.getvalue())
    for key, value in arrays().items():
        buf = io.BytesIO()
        np.save(buf, value)
        put("fuzz_npy", key + ".npy", buf.getvalue())
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.arange(6, dtype=np.float32).reshape(2, 3), version=(2, 0))
    put("fuzz_npy", "v2.npy", buf.getvalue())


def safetensors(tensors):
    header, data = {}, b""
    for name, (dtype, array) in tensors.items():
        raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    a = arrays()
    put("fuzz_safetensors", "mixed.safetensors", safetensors({
        "w": ("F32", a["w"]), "ids": ("I64", a["ids"]), "count": ("I32", a["count"]),
        "mask": ("BOOL", a["mask"])}))
    put("fuzz_safetensors", "widen.safetensors", safetensors({
        "h": ("F16", a["w"].astype(np.float16)), "d": ("F64", a["w"].astype(np.float64))}))


def onnx_models():
    rng = np.random.default_rng(5)
    f = lambda *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32))
    def model(nodes, inputs, outputs, inits, name):
        for init, init_name in inits:
            init.name = init_name
        graph = helper.make_graph(nodes, name, inputs, outputs, [i for i, _ in inits])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        return m.SerializeToString()
    vi = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
    mlp = model([helper.make_node("MatMul", ["x", "w1"], ["h"], name="/fc1/MatMul"),
                 helper.make_node("Relu", ["h"], ["hr"], name="/act/Relu"),
                 helper.make_node("MatMul", ["hr", "w2"], ["y0"], name="/fc2/MatMul"),
                 helper.make_node("Add", ["y0", "b2"], ["y"], name="/fc2/Add")],
                [vi("x", [2, 8])], [vi("y", [2, 4])],
                [(f(8, 16), "w1"), (f(16, 4), "w2"), (f(4), "b2")], "mlp")
    softmax = model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                     helper.make_node("Softmax", ["g"], ["y"], axis=-1)],
                    [vi("x", [4, 6])], [vi("y", [4, 3])],
                    [(f(3, 6), "w"), (f(3), "b")], "gemm_softmax")
    shape = numpy_helper.from_array(np.array([2, 12], dtype=np.int64))
    reshape = model([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                     helper.make_node("Tanh", ["r"], ["y"])],
                    [vi("x", [2, 3, 4])], [vi("y", [2, 12])], [(shape, "shape")], "reshape")
    return {"mlp.onnx": mlp, "gemm_softmax.onnx": softmax, "reshape.onnx": reshape}


def onnx_and_ipx(build_dir):
    cli = os.path.join(build_dir, "client", "ipupod")
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in onnx_models().items():
            put("fuzz_onnx_compile", name, data)
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            ipx = path[:-5] + ".ipx"
            subprocess.run([cli, "compile", path, "-o", ipx], check=True, capture_output=True)
            with open(ipx, "rb") as f:
                put("fuzz_executable", name[:-5] + ".ipx", f.read())


def configs():
    for name in ("gpt2_ipu_config.json", "bert_ipu_config.json"):
        with open(os.path.join(ROOT, "tests", "device", "compiler", "testdata", name), "rb") as f:
            put("fuzz_ipu_config", name, f.read())
    put("fuzz_ipu_config", "small.json", json.dumps(
        {"layers_per_ipu": [2, 2], "device_iterations": 4, "replication_factor": 2}).encode())
    put("fuzz_ipu_config", "set.txt", b"device_iterations=2,inference_replication_factor=2")
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        text = f.read()
    start = text.index("```json\n") + len("```json\n")
    put("fuzz_server_config", "documented.json", text[start:text.index("```", start)].encode())
    put("fuzz_server_config", "minimal.json", b'{"pod": "POD4", "listen": "127.0.0.1:0"}')
    put("fuzz_server_config", "pod.txt", b"POD64")
    put("fuzz_server_config", "tls.json", json.dumps(
        {"listen": "0.0.0.0:50051", "tokens": [{"token": "t", "user": "alice"}],
         "tls": {"cert": "server.pem", "key": "server.key", "client_ca": "ca.pem"}}).encode())


def varint(v):
    out = b""
    while True:
        out += bytes([(v & 0x7F) | (0x80 if v >= 0x80 else 0)])
        v >>= 7
        if not v:
            return out


def header(name, dtype, shape, total):
    field = lambda n, wt, payload: varint(n << 3 | wt) + payload
    out = field(1, 2, varint(len(name)) + name.encode())
    out += field(2, 2, varint(len(dtype)) + dtype.encode())
    for d in shape:
        out += field(3, 0, varint(d))
    return out + field(4, 0, varint(total))


def message(kind, payload):
    return bytes([kind]) + struct.pack("<I", len(payload))[:3] + payload


def tensor_streams():
    a = arrays()
    stream = b""
    for name, dtype in (("w", "float32"), ("ids", "int64"), ("count", "int32"), ("mask", "bool")):
        raw = a[name].tobytes()
        stream += message(0, header(name, dtype, a[name].shape, len(raw)))
        stream += message(1, raw[: len(raw) // 2]) + message(1, raw[len(raw) // 2:])
    put("fuzz_tensor_stream", "four.bin", stream)
    put("fuzz_tensor_stream", "empty_tensor.bin", message(0, header("e", "float32", [0, 3], 0)))


def custom_op_messages():
    """Messages of the custom op protocol (device/customop/protocol.h), as the helper and ipupodd
    write them: little-endian numbers, strings and byte runs with a u64 length."""
    def text(b):
        return struct.pack("<Q", len(b)) + b

    def wire_type(dtype, dims):
        return struct.pack("<iI", dtype, len(dims)) + b"".join(struct.pack("<q", d) for d in dims)

    def tensor(dtype, dims, raw):
        return wire_type(dtype, dims) + text(raw)

    op = (text(b"com.acme") + text(b"Cube") + struct.pack("<iiiiI", 1, 0, 2, 2, 2) +
          struct.pack("<ii", 1, 1) + struct.pack("<BI", 0, 1) + text(b"alpha") +
          struct.pack("<B", 1))
    put("fuzz_custom_op_protocol", "hello.bin",
        struct.pack("<BI", 0, 1) + text(b"acme ops") + struct.pack("<I", 1) + op)
    put("fuzz_custom_op_protocol", "hello_error.bin", struct.pack("<B", 1) + text(b"dlopen"))
    put("fuzz_custom_op_protocol", "types_reply.bin",
        struct.pack("<BI", 0, 1) + wire_type(1, [2, 3]))
    x = struct.pack("<ff", 1.5, -2.0)
    put("fuzz_custom_op_protocol", "tensors_reply.bin",
        struct.pack("<BI", 0, 1) + tensor(1, [2], x))
    put("fuzz_custom_op_protocol", "gradient_reply.bin",
        struct.pack("<BIB", 0, 2, 1) + tensor(1, [2], x) + struct.pack("<B", 0))
    alpha = (text(b"alpha") + struct.pack("<iIf", 1, 1, 0.02) + struct.pack("<II", 0, 0))
    put("fuzz_custom_op_protocol", "compute_request.bin",
        struct.pack("<BII", 2, 0, 1) + alpha + struct.pack("<I", 1) + tensor(1, [2], x) +
        struct.pack("<I", 1) + wire_type(1, [2]))


def clear_seeds():
    """Removes the seeds this script wrote before; regression inputs (regression-*), the
    findings of earlier runs, are kept."""
    for target in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        for name in os.listdir(os.path.join(CORPUS, target)):
            if not name.startswith("regression-"):
                os.remove(os.path.join(CORPUS, target, name))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py BUILD_DIR (a build with client/ipupod)")
    clear_seeds()
    npz_and_npy()
    safetensors_seeds()
    onnx_and_ipx(sys.argv[1])
    configs()
    tensor_streams()
    custom_op_messages()
    for target in sorted(os.listdir(CORPUS)):
        print(target, len(os.listdir(os.path.join(CORPUS, target))), "seeds")


if __name__ == "__main__":
    main()
