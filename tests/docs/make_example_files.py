#!/usr/bin/env python3
"""Writes the files the examples of README.md and docs/cli.md use into a directory.

    /usr/bin/python3 tests/docs/make_example_files.py DIR

Small models built with the onnx package (no torch needed) and their data, named as the
examples name them:

* mlp.onnx: y = relu(x W1 + b1) W2 + b2, x float32[4, 16] -> y float32[4, 4]; nodes under
  the modules fc1 and fc2 (so map.json can place them), weights fc1.weight, fc1.bias,
  fc2.weight, fc2.bias.
* mlp_train.onnx: the same with a target t float32[4, 4] and loss = mean((y - t)^2), the
  model's only scalar output (what `compile --train` trains on).
* half_train.onnx: mlp_train.onnx in float16 (weights, inputs and outputs).
* counter.onnx: PopTorch's CounterModel with an input: count_next = count + 1 (a buffer,
  `compile --buffer count=count_next`), y = (x W) * count_next; x float32[2, 3].
* x.npz (x: 64 samples), data.npz (x and t: 64 samples), half_data.npz (float16),
  counter_x.npz (x: 16 samples); finetuned.safetensors (mlp.onnx's weights, other values);
  ipu_config.json (an optimum-graphcore IPUConfig); map.json ({"fc1": 0, "fc2": 1}).

tests/docs/examples_test.py runs the examples in such a directory.
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
MICRO_BATCH = 4
SAMPLES = 64


def weights(seed: int, dtype=np.float32) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "fc1.weight": (rng.standard_normal((16, 32)) * 0.25).astype(dtype),
        "fc1.bias": (rng.standard_normal(32) * 0.1).astype(dtype),
        "fc2.weight": (rng.standard_normal((32, 4)) * 0.25).astype(dtype),
        "fc2.bias": (rng.standard_normal(4) * 0.1).astype(dtype),
    }


def mlp(with_loss: bool, dtype=np.float32) -> onnx.ModelProto:
    elem = TensorProto.FLOAT16 if dtype == np.float16 else FLOAT
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"], name="/fc1/MatMul"),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"], name="/fc1/Add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="/act/Relu"),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"], name="/fc2/MatMul"),
        helper.make_node("Add", ["h3", "fc2.bias"], ["y"], name="/fc2/Add"),
    ]
    inputs = [helper.make_tensor_value_info("x", elem, [MICRO_BATCH, 16])]
    outputs = [helper.make_tensor_value_info("y", elem, [MICRO_BATCH, 4])]
    if with_loss:
        nodes += [
            helper.make_node("Sub", ["y", "t"], ["d"], name="/loss/Sub"),
            helper.make_node("Mul", ["d", "d"], ["sq"], name="/loss/Mul"),
            helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="/loss/ReduceMean"),
        ]
        inputs.append(helper.make_tensor_value_info("t", elem, [MICRO_BATCH, 4]))
        outputs.append(helper.make_tensor_value_info("loss", elem, []))
    initializers = [numpy_helper.from_array(v, k) for k, v in weights(0, dtype).items()]
    graph = helper.make_graph(nodes, "mlp", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def counter() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["count", "one"], ["count_next"], name="/Add"),
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="/MatMul"),
        helper.make_node("Mul", ["xw", "count_next"], ["y"], name="/Mul"),
    ]
    initializers = [
        numpy_helper.from_array(np.array([0.0], np.float32), "count"),
        numpy_helper.from_array(np.array([1.0], np.float32), "one"),
        numpy_helper.from_array(np.linspace(-0.5, 0.5, 6, dtype=np.float32).reshape(3, 2), "W"),
    ]
    graph = helper.make_graph(
        nodes, "counter", [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", FLOAT, [2, 2]),
         helper.make_tensor_value_info("count_next", FLOAT, [1])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def write_safetensors(path: str, tensors: dict) -> None:
    """The safetensors layout: an 8-byte little-endian header size, a JSON header, the data."""
    header, offset, data = {}, 0, b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)

    def at(name: str) -> str:
        return os.path.join(directory, name)

    onnx.save(mlp(with_loss=False), at("mlp.onnx"))
    onnx.save(mlp(with_loss=True), at("mlp_train.onnx"))
    onnx.save(mlp(with_loss=True, dtype=np.float16), at("half_train.onnx"))
    onnx.save(counter(), at("counter.onnx"))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SAMPLES, 16)).astype(np.float32)
    t = np.tanh(x[:, :4] - x[:, 4:8]).astype(np.float32)
    np.savez(at("x.npz"), x=x)
    np.savez(at("data.npz"), x=x, t=t)
    np.savez(at("half_data.npz"), x=x.astype(np.float16), t=t.astype(np.float16))
    np.savez(at("counter_x.npz"), x=rng.standard_normal((16, 3)).astype(np.float32))
    write_safetensors(at("finetuned.safetensors"), weights(2))
    with open(at("ipu_config.json"), "w") as f:
        json.dump({"ipus_per_replica": 1, "inference_device_iterations": 2,
                   "device_iterations": 2, "gradient_accumulation_steps": 2}, f, indent=2)
    with open(at("map.json"), "w") as f:
        json.dump({"fc1": 0, "fc2": 1}, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_example_files.py DIR")
    main(sys.argv[1])
