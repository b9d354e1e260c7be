#!/usr/bin/python3
"""Builds the float16 run cases for tests/integration/half_test.

Usage: /usr/bin/python3 make_half_cases.py OUT_DIR

torch 1.13 cannot trace model.half() on the CPU, so each model is exported in
float32 and its graph converted to float16 as a user would (what
onnxconverter-common's float16 converter does): float initializers and Constant
values become FLOAT16, and so do the graph's float inputs, outputs and value
infos, and Casts to FLOAT.

The expected outputs come from a float32 reference rounded the way ipupod models
the IPU (docs/differences.md, "float16"): every node computes in float32 on the
exact values of its float16 operands and its float output is rounded to float16;
with enable_half_partials, MatMul, Gemm and Conv sum their reduced axis in blocks
of 16 products, each block in float32, and round the running sum to float16 after
every block. The reference evaluates the converted graph node by node with
torch's float32 functions (a small evaluator for the ops these models use).

For each inference case NAME this writes, into OUT_DIR/NAME/:
  model.onnx        the float16 model
  ipu_config.json   its IPUConfig (enable_half_partials true or false)
  inputs.npz        float16 inputs for STEPS steps, keyed by ONNX input name
  expected.npz      the reference's float16 outputs, keyed by output name
  float32.npz       the float32 model's outputs on the same inputs
and one line "NAME SAMPLES_PER_STEP STEPS" per case in OUT_DIR/manifest.txt.

Training (OUT_DIR/train/): a float16 linear model whose loss carries a small
weight (1e-4, as a weighted term of a larger loss would), so that d(loss)/d(out)
is about 4e-9 and underflows float16 (its smallest subnormal is 6e-8):
  model.onnx        (x, target) -> (out, loss), float16, weights ~1e-3
  data.npz          STEPS batches of 64 float16 samples
  initial.npz       the weights as exported (float16)
  reference.npz     the weights after STEPS steps of SGD (lr 1000) in float32 torch
  manifest.txt      "STEPS"
Seeded: reruns write identical files. Exits 77 (skip) without torch or onnx.
"""
import io
import json
import os
import sys

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
except ImportError as e:
    print("make_half_cases.py: cannot import torch/onnx/numpy: %s" % e, file=sys.stderr)
    sys.exit(77)

FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
BLOCK = 16  # products per block with half partials (device/graph/ops_float16.cc)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(200, 96)
        self.fc2 = torch.nn.Linear(96, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(torch.nn.Module):
    """LayerNorm, GELU (erf), a product and Softmax: element-wise ops that round."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(48)
        self.fc = torch.nn.Linear(48, 48)

    def forward(self, x):
        h = F.gelu(self.fc(self.norm(x)))
        return torch.softmax(h @ h.transpose(1, 2) / 7.0, dim=-1)


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(24, 32, 3, stride=2)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = F.adaptive_avg_pool2d(torch.relu(self.conv2(h)), 1).flatten(1)
        return self.head(h)


# ---- float32 -> float16 graph conversion ----

def to_float16(model):
    g = model.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == FLOAT:
            g.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == FLOAT:
            v.type.tensor_type.elem_type = FLOAT16
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Constant" and a.t.data_type == FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
            if node.op_type == "Cast" and a.name == "to" and a.i == FLOAT:
                a.i = FLOAT16
    return model


# ---- the reference: node by node, float32 arithmetic, float16 results ----

def r16(t):
    return t.half().float() if t.is_floating_point() else t


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def blocked(product, a, b, length, slicer_a, slicer_b):
    """Half partials: the running sum rounded after every block of the reduced axis."""
    acc = None
    for k in range(0, length, BLOCK):
        part = product(slicer_a(a, k, min(length, k + BLOCK)), slicer_b(b, k, min(length, k + BLOCK)))
        acc = r16(part if acc is None else acc + part)
    return acc


def gemm(x, a, half):
    A, B = x[0], x[1]
    A = A.t() if a.get("transA", 0) else A
    B = B.t() if a.get("transB", 0) else B
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if half:
        y = blocked(lambda p, q: alpha * (p @ q), A, B, A.shape[1],
                    lambda t, s, e: t[:, s:e], lambda t, s, e: t[s:e, :])
        return y + beta * x[2] if len(x) > 2 else y
    y = alpha * (A @ B)
    return y + beta * x[2] if len(x) > 2 else y


def matmul(x, half):
    A, B = x
    if not half:
        return A @ B
    return blocked(lambda p, q: p @ q, A, B, A.shape[-1],
                   lambda t, s, e: t[..., s:e], lambda t, s, e: t[..., s:e, :])


def conv(x, a, half):
    X, W = x[0], x[1]
    pads = a.get("pads", [0] * 4)
    assert pads[0] == pads[2] and pads[1] == pads[3]
    kw = dict(stride=a.get("strides", 1), padding=(pads[0], pads[1]),
              dilation=a.get("dilations", 1), groups=a.get("group", 1))
    assert kw["groups"] == 1
    if half:
        y = blocked(lambda p, q: F.conv2d(p, q, **kw), X, W, W.shape[1],
                    lambda t, s, e: t[:, s:e], lambda t, s, e: t[:, s:e])
    else:
        y = F.conv2d(X, W, **kw)
    return y + x[2].reshape(1, -1, 1, 1) if len(x) > 2 else y


def max_pool(x, a):
    pads = a.get("pads", [0] * 4)
    return F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", 1), (pads[0], pads[1]),
                        ceil_mode=bool(a.get("ceil_mode", 0)))


def layer_norm(x, a):
    axis = a.get("axis", -1)
    shape = x[0].shape[axis:]
    return F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))


def evaluate_node(node, x, half):
    a, op = attrs(node), node.op_type
    simple = {"Add": lambda: x[0] + x[1], "Sub": lambda: x[0] - x[1], "Mul": lambda: x[0] * x[1],
              "Div": lambda: x[0] / x[1], "Relu": lambda: torch.relu(x[0]),
              "Erf": lambda: torch.erf(x[0]), "Sqrt": lambda: torch.sqrt(x[0]),
              "Pow": lambda: torch.pow(x[0], x[1]),
              "GlobalAveragePool": lambda: x[0].mean(dim=(2, 3), keepdim=True),
              "Flatten": lambda: x[0].flatten(a.get("axis", 1)),
              "Reshape": lambda: x[0].reshape([int(d) for d in x[1]]),
              "Transpose": lambda: x[0].permute(a["perm"]),
              "Softmax": lambda: torch.softmax(x[0], a.get("axis", -1)),
              "Shape": lambda: torch.tensor(x[0].shape, dtype=torch.int64)}
    if op in simple:
        return simple[op]()
    if op == "Gemm":
        return gemm(x, a, half)
    if op == "MatMul":
        return matmul(x, half)
    if op == "Conv":
        return conv(x, a, half)
    if op == "MaxPool":
        return max_pool(x, a)
    if op == "LayerNormalization":
        return layer_norm(x, a)
    if op == "Constant":
        return torch.from_numpy(numpy_helper.to_array(a["value"]).astype(np.float32)
                                if a["value"].data_type == FLOAT16
                                else numpy_helper.to_array(a["value"]).copy())
    raise NotImplementedError("the reference has no %s" % op)


def reference(model, feeds, half):
    """The float16 model's outputs: float32 arithmetic per node, rounded per node."""
    env = {}
    for t in model.graph.initializer:
        v = numpy_helper.to_array(t)
        env[t.name] = torch.from_numpy(v.astype(np.float32) if v.dtype == np.float16 else v.copy())
    for name, v in feeds.items():
        env[name] = torch.from_numpy(v.astype(np.float32))
    for node in model.graph.node:
        out = evaluate_node(node, [env[i] for i in node.input if i], half)
        env[node.output[0]] = r16(out)
    return {o.name: env[o.name].numpy().astype(np.float16) for o in model.graph.output}


# ---- cases ----

def cases():
    torch.manual_seed(7)
    yield "mlp_half", Mlp(), (4, 200), False, 3
    torch.manual_seed(7)
    yield "mlp_half_partials", Mlp(), (4, 200), True, 3
    torch.manual_seed(8)
    yield "block_half", Block(), (2, 12, 48), False, 2
    torch.manual_seed(9)
    yield "cnn_half_partials", Cnn(), (2, 3, 16, 16), True, 2


def export(module, shape):
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), (torch.randn(*shape),), buf, input_names=["x"],
                      output_names=["y"], opset_version=17, do_constant_folding=True)
    return onnx.load_from_string(buf.getvalue())


def write_case(out_dir, name, module, shape, half_partials, steps):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model32 = export(module, shape)
    model16 = to_float16(onnx.load_from_string(model32.SerializeToString()))
    onnx.save(model16, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "ipu_config.json"), "w") as f:
        json.dump({"enable_half_partials": half_partials}, f)
    x = (torch.randn(steps * shape[0], *shape[1:]) * 2).numpy().astype(np.float16)
    expected, wide = [], []
    for s in range(steps):
        feed = {"x": x[s * shape[0]:(s + 1) * shape[0]]}
        expected.append(reference(model16, feed, half_partials)["y"])
        with torch.no_grad():
            wide.append(module(torch.from_numpy(feed["x"].astype(np.float32))).numpy())
    np.savez(os.path.join(d, "inputs.npz"), x=x)
    np.savez(os.path.join(d, "expected.npz"), y=np.concatenate(expected))
    np.savez(os.path.join(d, "float32.npz"), y=np.concatenate(wide))
    return shape[0]


class WeightedLinearMse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 8)
        with torch.no_grad():
            self.fc.weight.uniform_(-1e-3, 1e-3)
            self.fc.bias.zero_()

    def forward(self, x, target):
        out = self.fc(x)
        return out, ((out - target) ** 2).mean() * 1e-4


def write_training(out_dir, steps=30, batch=64, lr=1000.0):
    d = os.path.join(out_dir, "train")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(11)
    module = WeightedLinearMse()
    with torch.no_grad():  # start both from the float16 values
        for p in module.parameters():
            p.copy_(p.half().float())
    x = torch.randn(steps * batch, 32).half().float()
    t = (torch.randn(steps * batch, 8) * 0.01).half().float()
    buf = io.BytesIO()
    torch.onnx.export(module, (x[:batch], t[:batch]), buf, input_names=["x", "target"],
                      output_names=["out", "loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model = to_float16(onnx.load_from_string(buf.getvalue()))
    onnx.save(model, os.path.join(d, "model.onnx"))
    names = {t.name for t in model.graph.initializer}
    initial = {n: p.detach().numpy().astype(np.float16) for n, p in module.named_parameters()}
    assert set(initial) <= names, (initial.keys(), names)
    np.savez(os.path.join(d, "initial.npz"), **initial)
    np.savez(os.path.join(d, "data.npz"), x=x.numpy().astype(np.float16),
             target=t.numpy().astype(np.float16))
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    for s in range(steps):
        opt.zero_grad()
        _, loss = module(x[s * batch:(s + 1) * batch], t[s * batch:(s + 1) * batch])
        loss.backward()
        opt.step()
    np.savez(os.path.join(d, "reference.npz"),
             **{n: p.detach().numpy() for n, p in module.named_parameters()})
    with open(os.path.join(d, "manifest.txt"), "w") as f:
        f.write("%d\n" % steps)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    write_training(out_dir)
    lines = []
    for name, module, shape, half_partials, steps in cases():
        samples = write_case(out_dir, name, module, shape, half_partials, steps)
        lines.append("%s %d %d\n" % (name, samples, steps))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
