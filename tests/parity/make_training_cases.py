#!/usr/bin/python3
"""Builds the training parity cases for tests/training/parity_test.

Usage: /usr/bin/python3 make_training_cases.py OUT_DIR

Each case NAME is a model that returns (output, loss), exported once with
torch.onnx.export (static shapes, opset 14) before training, then trained
in eager PyTorch (fp32, CPU). Files written into OUT_DIR:
  NAME.onnx                  the untrained model (one micro-batch)
  NAME.<array>.npy           inputs and torch's results (see each case)
  NAME.weights.txt           one line per float initializer of the ONNX file:
                             "<onnx name> <npy file of torch's final value>"
torch.onnx folds weight transposes (a Linear on a 1-D input becomes MatMul
with an initializer holding weight.T); the final values are written in the
ONNX layout, so they compare element by element.

Cases:
  linear_mse     the seed's example (PopTorch docs 4.2.1): Linear(10, 10),
                 MSE loss written as ((y - t) ** 2).mean() (torch 1.13 cannot
                 export F.mse_loss), 800 steps of SGD lr 0.01.
                 Arrays: x, target, out (trained model's output for x).
  gelu_adam      Linear/GELU classifier, F.cross_entropy, Adam (defaults),
                 200 steps on a new batch each step.
                 Arrays: x [200, 8, 16], labels [200, 8], losses [200].
  accum_replicas Linear/Tanh/Linear with an MSE loss, micro-batch 2, SGD
                 lr 0.05 momentum 0.9: torch takes 4 steps on batches of 32,
                 which ipupod takes as gradient_accumulation_steps 8 x
                 replicas 2 micro-batches with mean reduction.
                 Arrays: x [4, 32, 6], target [4, 32, 3].

Gradient cases: one forward/backward in training mode (batch statistics),
exported with training=TrainingMode.TRAINING and do_constant_folding=False,
so every initializer keeps its torch name and layout. BatchNorm's weight,
bias and running statistics start from random values. Files:
  NAME.onnx, NAME.x.npy, NAME.target.npy (labels: int64), NAME.out.npy,
  NAME.loss.npy       the untrained model, the batch, torch's output and loss
  NAME.grads.txt      "<parameter> <npy file of its gradient>" per parameter
  NAME.buffers.txt    "<buffer> <npy file of its value after the step>" per
                      running_mean/running_var (BatchNormalization outputs 1, 2
                      in the ONNX graph, not graph outputs)
  bn1d_grads     Linear/BatchNorm1d/ReLU/Linear, MSE loss, opset 15
                 (BatchNormalization with training_mode=1, 3 outputs).
  bn2d_grads     per-channel gain, BatchNorm2d on [4, 3, 4, 4], Flatten,
                 Linear, F.cross_entropy, opset 13 (5 outputs, no
                 training_mode attribute).
  cnn_grads      Conv2d/Conv1d (grouped, depthwise, dilated, strided),
                 BatchNorm2d, ReLU6, max and average pooling (ceil_mode,
                 padding), F.pad, global average pooling, F.cross_entropy,
                 opset 13.
  hard_grads     Linear layers through Hardswish and Hardsigmoid (MobileNetV3's
                 activations), F.cross_entropy, opset 14.
Exits with status 77 (the conventional "skip") if torch or numpy is missing.
"""
import os
import sys

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from onnx import numpy_helper
except ImportError as e:  # the C++ test turns this into GTEST_SKIP
    print("make_training_cases.py: cannot import torch/numpy/onnx: %s" % e, file=sys.stderr)
    sys.exit(77)


class LinearMse(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x, target):
        fc = self.fc(x)
        return fc, ((fc - target) ** 2).mean()


class GeluClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(),
                                    nn.Linear(32, 5))

    def forward(self, x, labels):
        logits = self.layers(x)
        return logits, F.cross_entropy(logits, labels)


class TanhRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, target):
        y = self.fc2(torch.tanh(self.fc1(x)))
        return y, ((y - target) ** 2).mean()


class LinearBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.bn = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 3)

    def forward(self, x, target):
        y = self.head(torch.relu(self.bn(self.fc(x))))
        return y, ((y - target) ** 2).mean()


class BatchNorm2dClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.rand(1, 3, 1, 1) + 0.5)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 4 * 4, 5)

    def forward(self, x, labels):
        logits = self.fc(self.bn(x * self.gain).flatten(1))
        return logits, F.cross_entropy(logits, labels)


class ConvNetClassifier(nn.Module):
    """Every convolutional op with a backward rule: Conv2d with BatchNorm2d in
    training mode and ReLU6, ceil-mode max pooling, a grouped and a
    depthwise convolution, constant padding, dilated max pooling, average
    pooling that counts its padding, global average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2, ceil_mode=True)
        self.grouped = nn.Conv2d(8, 8, 3, groups=2, stride=2, padding=1, bias=False)
        self.depthwise = nn.Conv2d(8, 8, 3, groups=8, dilation=2, padding=2)
        self.pool2 = nn.MaxPool2d(3, stride=1, padding=1, dilation=1)
        self.pool3 = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.conv1d = nn.Conv1d(8, 4, 3, stride=2)
        self.fc = nn.Linear(8 + 4, 5)

    def forward(self, x, labels):
        h = self.pool1(F.relu6(self.bn1(self.conv1(x))))           # [N, 8, 5, 5]
        h = F.relu(self.grouped(F.pad(h, (1, 0, 0, 1))))          # [N, 8, 3, 3]
        h = self.pool3(self.pool2(self.depthwise(h)))             # [N, 8, 3, 3]
        pooled = F.adaptive_avg_pool2d(h, 1).flatten(1)           # [N, 8]
        seq = self.conv1d(h.flatten(2))                           # [N, 4, 4]
        logits = self.fc(torch.cat([pooled, seq.mean(-1)], dim=1))
        return logits, F.cross_entropy(logits, labels)


class HardActivationsClassifier(nn.Module):
    """Hardswish and Hardsigmoid on the gradient path (opset 14)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 5)

    def forward(self, x, labels):
        h = F.hardswish(self.fc1(x) * 3)
        logits = self.fc3(F.hardsigmoid(self.fc2(h) * 3) * h)
        return logits, F.cross_entropy(logits, labels)


def export(model, args, path):
    torch.onnx.export(model, args, path, opset_version=14, input_names=["x", "target"],
                      output_names=["out", "loss"])


def onnx_layout(model, path):
    """Maps each float initializer of the ONNX file to (param name, transposed)."""
    params = {n: p.detach().numpy() for n, p in model.named_parameters()}
    mapping = []
    for init in onnx.load(path).graph.initializer:
        value = numpy_helper.to_array(init)
        if value.dtype != np.float32:
            continue
        if init.name in params and np.array_equal(params[init.name], value):
            mapping.append((init.name, init.name, False))
            continue
        match = [n for n, p in params.items() if p.ndim == 2 and np.array_equal(p.T, value)]
        if len(match) != 1:
            raise RuntimeError("cannot map initializer %s to a parameter" % init.name)
        mapping.append((init.name, match[0], True))
    return mapping


def save_weights(out_dir, name, model, mapping):
    params = dict(model.named_parameters())
    lines = []
    for i, (onnx_name, param, transposed) in enumerate(mapping):
        value = params[param].detach().numpy()
        file = "%s.final%d.npy" % (name, i)
        np.save(os.path.join(out_dir, file), value.T.copy() if transposed else value)
        lines.append("%s %s\n" % (onnx_name, file))
    with open(os.path.join(out_dir, name + ".weights.txt"), "w") as f:
        f.writelines(lines)


def linear_mse(out_dir):
    torch.manual_seed(0)
    model = LinearMse()
    x, target = torch.randn(10), torch.randn(10)
    path = os.path.join(out_dir, "linear_mse.onnx")
    export(model, (x, target), path)
    mapping = onnx_layout(model, path)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(800):
        opt.zero_grad()
        _, loss = model(x, target)
        loss.backward()
        opt.step()
    with torch.no_grad():
        out, _ = model(x, target)
    for n, t in (("x", x), ("target", target), ("out", out)):
        np.save(os.path.join(out_dir, "linear_mse.%s.npy" % n), t.numpy())
    save_weights(out_dir, "linear_mse", model, mapping)


def gelu_adam(out_dir):
    torch.manual_seed(1)
    model = GeluClassifier()
    steps, batch = 200, 8
    x = torch.randn(steps, batch, 16)
    labels = torch.randint(0, 5, (steps, batch))
    path = os.path.join(out_dir, "gelu_adam.onnx")
    export(model, (x[0], labels[0]), path)
    mapping = onnx_layout(model, path)
    opt = torch.optim.Adam(model.parameters())
    losses = []
    for s in range(steps):
        opt.zero_grad()
        _, loss = model(x[s], labels[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.save(os.path.join(out_dir, "gelu_adam.x.npy"), x.numpy())
    np.save(os.path.join(out_dir, "gelu_adam.labels.npy"), labels.numpy())
    np.save(os.path.join(out_dir, "gelu_adam.losses.npy"), np.array(losses, dtype=np.float32))
    save_weights(out_dir, "gelu_adam", model, mapping)


def accum_replicas(out_dir):
    torch.manual_seed(2)
    model = TanhRegressor()
    steps, micro, per_step = 4, 2, 16  # 16 = gradient_accumulation_steps 8 x replicas 2
    x = torch.randn(steps, micro * per_step, 6)
    target = torch.randn(steps, micro * per_step, 3)
    path = os.path.join(out_dir, "accum_replicas.onnx")
    export(model, (x[0, :micro], target[0, :micro]), path)
    mapping = onnx_layout(model, path)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for s in range(steps):
        opt.zero_grad()
        _, loss = model(x[s], target[s])  # the large batch: mean over all 32 rows
        loss.backward()
        opt.step()
    np.save(os.path.join(out_dir, "accum_replicas.x.npy"), x.numpy())
    np.save(os.path.join(out_dir, "accum_replicas.target.npy"), target.numpy())
    save_weights(out_dir, "accum_replicas", model, mapping)


def randomize_batchnorm(model):
    """Random affine parameters and running statistics, so none is trivial."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)


def gradient_case(out_dir, name, model, x, target, opset):
    """One training-mode step's output, loss, gradients and running stats."""
    path = os.path.join(out_dir, name + ".onnx")
    randomize_batchnorm(model)
    model.train()
    torch.onnx.export(model, (x, target), path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x", "target"], output_names=["out", "loss"])
    # Tracing ran a forward pass that moved the running statistics: restart
    # from the values the ONNX file holds.
    initial = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    state = model.state_dict()
    with torch.no_grad():
        for key, value in initial.items():
            state[key].copy_(torch.from_numpy(value.copy()))
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    model.zero_grad()
    out, loss = model(x, target)
    loss.backward()
    grads, stats = [], []
    for i, key in enumerate(sorted(initial)):
        if key in params:
            file = "%s.grad%d.npy" % (name, i)
            np.save(os.path.join(out_dir, file), params[key].grad.numpy())
            grads.append("%s %s\n" % (key, file))
        elif key in buffers:
            file = "%s.buffer%d.npy" % (name, i)
            np.save(os.path.join(out_dir, file), buffers[key].numpy())
            stats.append("%s %s\n" % (key, file))
        else:
            raise RuntimeError("initializer %s is neither a parameter nor a buffer" % key)
    with open(os.path.join(out_dir, name + ".grads.txt"), "w") as f:
        f.writelines(grads)
    with open(os.path.join(out_dir, name + ".buffers.txt"), "w") as f:
        f.writelines(stats)
    for n, t in (("x", x), ("target", target), ("out", out.detach()), ("loss", loss.detach())):
        np.save(os.path.join(out_dir, "%s.%s.npy" % (name, n)), t.numpy())


def bn1d_grads(out_dir):
    torch.manual_seed(3)
    model = LinearBatchNorm()
    gradient_case(out_dir, "bn1d_grads", model, torch.randn(8, 6) * 2 + 1, torch.randn(8, 3), 15)


def bn2d_grads(out_dir):
    torch.manual_seed(4)
    model = BatchNorm2dClassifier()
    gradient_case(out_dir, "bn2d_grads", model, torch.randn(4, 3, 4, 4) - 0.5,
                  torch.randint(0, 5, (4,)), 13)


def cnn_grads(out_dir):
    torch.manual_seed(5)
    model = ConvNetClassifier()
    gradient_case(out_dir, "cnn_grads", model, torch.randn(4, 3, 9, 9),
                  torch.randint(0, 5, (4,)), 13)


def hard_grads(out_dir):
    torch.manual_seed(6)
    gradient_case(out_dir, "hard_grads", HardActivationsClassifier(), torch.randn(8, 6),
                  torch.randint(0, 5, (8,)), 14)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    linear_mse(out_dir)
    gelu_adam(out_dir)
    accum_replicas(out_dir)
    bn1d_grads(out_dir)
    bn2d_grads(out_dir)
    cnn_grads(out_dir)
    hard_grads(out_dir)


if __name__ == "__main__":
    main()
