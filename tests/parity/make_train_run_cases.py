#!/usr/bin/python3
"""Builds the end-to-end training parity cases for
tests/integration/train_parity_test (ipupod compile --train + ipupod run
--train on a real ipupodd, against eager PyTorch 1.13 on the CPU).

Usage: /usr/bin/python3 make_train_run_cases.py OUT_DIR

Per case, OUT_DIR/NAME/ holds:
  model.onnx         the untrained model (one micro-batch), returning (out, loss)
  ipu_config.json    the IPUConfig to compile with
  module_map.json    (pipelined case) module name -> IPU
  compile_args.txt   extra `ipupod compile --train` arguments, one per line
  data.npz           the whole data set, samples along dim 0
  expected.npz       torch's trained weights (and buffers) under their ONNX
                     initializer names
  losses.npy         torch's loss of every weight update (float32)
  check.npz          (some cases) "x"/"target" and torch's trained output "out"
and OUT_DIR/manifest.txt has one line "NAME STEPS" (weight updates).

Cases (the issue's parity list):
  seed_linear_mse  the seed's example: Linear(10, 10), MSE written as
                   ((y - t) ** 2).mean() (torch 1.13 cannot export F.mse_loss),
                   SGD lr 0.01 (ipupod's default optimizer), 800 updates on one
                   batch of 4.
  gelu_adam        Linear/GELU classifier, F.cross_entropy, Adam defaults, 200
                   updates on a new batch of 8 each; device_iterations 4.
  pipelined        four Linear layers placed on 4 IPUs by a module map,
                   gradient_accumulation_steps 8 x replication 2 with
                   micro-batch 2, SGD lr 0.05 momentum 0.9: torch takes the
                   equivalent large-batch steps (32 samples); 4 updates.
  batchnorm        Linear + BatchNorm1d + ReLU + Linear exported in training
                   mode (opset 15), gradient_accumulation_steps 2 of 4 samples,
                   SGD lr 0.05 momentum 0.9, 20 updates: torch accumulates
                   over the micro-batches in turn, so the running statistics
                   (buffers updated in place) see each micro-batch as ipupod's do.
  cnn_sgd          two conv blocks with BatchNorm (training mode), pooling and a
                   linear head, F.cross_entropy, SGD lr 0.05 momentum 0.9, 100
                   updates of a micro-batch of 4 on 1 IPU.
  cnn_adam_pipelined  the same CNN over 2 IPUs (module map) x 2 replicas,
                   Adam defaults, 100 updates of 16 samples (accumulation 4 x 2
                   replicas of micro-batch 2, which torch runs in turn).
  layernorm_adamw_groups  Linear, LayerNorm, ReLU, Linear with AdamW (lr 0.01,
                   weight_decay 0.1) and optimum's param groups: no weight decay on
                   the biases and the LayerNorm weight (--opt-group ...:weight_decay=0),
                   40 updates of a batch of 8.
  sgd_two_lrs      the same model, SGD lr 0.05 momentum 0.9 with the head (fc2) in a
                   param group of lr 0.2 (--opt-group fc2.bias,fc2.weight:lr=0.2), 40
                   updates.
Exits with status 77 (skip) if torch, numpy or onnx is missing.
"""
import json
import os
import sys

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("make_train_run_cases.py: cannot import torch/numpy/onnx: %s" % e, file=sys.stderr)
    sys.exit(77)


class LinearMse(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x, target):
        y = self.fc(x)
        return y, ((y - target) ** 2).mean()


class GeluClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 5)

    def forward(self, x, target):
        logits = self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))
        return logits, F.cross_entropy(logits, target)


class BatchNormMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x, target):
        y = self.fc2(F.relu(self.bn(self.fc1(x))))
        return y, ((y - target) ** 2).mean()


class FourLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 12)
        self.fc3 = nn.Linear(12, 12)
        self.fc4 = nn.Linear(12, 3)

    def forward(self, x, target):
        h = torch.tanh(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        h = torch.tanh(self.fc3(h))
        y = self.fc4(h)
        return y, ((y - target) ** 2).mean()


class SmallCnn(nn.Module):
    """Two conv blocks with BatchNorm (training mode: batch statistics and
    running-statistics buffers), max and average pooling, a linear head. The
    convolutions have no bias, as usual before BatchNorm: its gradient is
    zero up to rounding, which Adam would amplify into noise-driven steps."""

    def __init__(self):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                    nn.ReLU(), nn.MaxPool2d(2))
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                    nn.ReLU(), nn.AvgPool2d(2))
        self.head = nn.Linear(16 * 2 * 2, 5)

    def forward(self, x, target):
        logits = self.head(self.block2(self.block1(x)).flatten(1))
        return logits, F.cross_entropy(logits, target)


class NormedRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, target):
        y = self.fc2(F.relu(self.ln(self.fc1(x))))
        return y, ((y - target) ** 2).mean()


def optimum_groups(model, weight_decay):
    """transformers' Trainer: weight decay on all but the biases and LayerNorm weights."""
    plain = [n for n, _ in model.named_parameters() if n.endswith("bias") or n.startswith("ln.")]
    return [{"params": [p for n, p in model.named_parameters() if n not in plain],
             "weight_decay": weight_decay},
            {"params": [p for n, p in model.named_parameters() if n in plain],
             "weight_decay": 0.0}]


def export(model, x, t, path, training):
    if training:  # BatchNorm with batch statistics and running-statistics outputs
        torch.onnx.export(model, (x, t), path, opset_version=15, input_names=["x", "target"],
                          output_names=["out", "loss"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        return
    torch.onnx.export(model, (x, t), path, opset_version=14, input_names=["x", "target"],
                      output_names=["out", "loss"], do_constant_folding=False)


def state(model):
    """Parameters and the float buffers (running statistics), by name."""
    out = dict(model.named_parameters())
    out.update({n: b for n, b in model.named_buffers() if b.is_floating_point()})
    return out


def onnx_names(path, model):
    """ONNX initializer name -> torch parameter or buffer (same name)."""
    params = state(model)
    names = {}
    for init in onnx.load(path).graph.initializer:
        if init.name in params:
            names[init.name] = init.name
    return names


def accumulated_step(model, optimizer, x, t, accumulation):
    """One update over `accumulation` micro-batches taken in turn (the mean
    of their gradients); returns the mean of their losses."""
    optimizer.zero_grad()
    total = 0.0
    for xm, tm in zip(x.chunk(accumulation), t.chunk(accumulation)):
        _, loss = model(xm, tm)
        (loss / accumulation).backward()
        total += loss.item() / accumulation
    optimizer.step()
    return total


def write_case(out_dir, name, model, make_batch, updates, config, compile_args,
               make_optimizer, module_map=None, check=None, accumulation=1, buffers=None):
    """accumulation > 1: torch runs the micro-batches of an update in turn
    (models with buffers); otherwise one large batch per update. buffers
    (default: accumulation > 1): export in training mode (BatchNorm's batch
    statistics and running-statistics buffers)."""
    case = os.path.join(out_dir, name)
    os.makedirs(case, exist_ok=True)
    x0, t0 = make_batch(0, micro=True)
    training = accumulation > 1 if buffers is None else buffers
    export(model, x0, t0, os.path.join(case, "model.onnx"), training=training)
    names = onnx_names(os.path.join(case, "model.onnx"), model)
    xs, ts, losses = [], [], []
    optimizer = make_optimizer(model)
    for step in range(updates):
        x, t = make_batch(step, micro=False)
        xs.append(x)
        ts.append(t)
        losses.append(accumulated_step(model, optimizer, x, t, accumulation))
    np.savez(os.path.join(case, "data.npz"), x=torch.cat(xs).numpy(),
             target=torch.cat(ts).numpy())
    params = state(model)
    np.savez(os.path.join(case, "expected.npz"),
             **{onnx_name: params[p].detach().numpy() for onnx_name, p in names.items()})
    np.save(os.path.join(case, "losses.npy"), np.array(losses, dtype=np.float32))
    if check is not None:
        x, t = check
        with torch.no_grad():
            out, _ = model(x, t)
        np.savez(os.path.join(case, "check.npz"), x=x.numpy(), target=t.numpy(), out=out.numpy())
    with open(os.path.join(case, "ipu_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(case, "compile_args.txt"), "w") as f:
        f.write("".join(a + "\n" for a in compile_args))
    if module_map is not None:
        with open(os.path.join(case, "module_map.json"), "w") as f:
            json.dump(module_map, f)
    return "%s %d\n" % (name, updates)


def main(out_dir):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    manifest = ""

    # The seed's example: one fixed batch, 800 SGD steps at lr 0.01.
    x = torch.randn(4, 10)
    t = torch.randn(4, 10)
    manifest += write_case(
        out_dir, "seed_linear_mse", LinearMse(), lambda step, micro: (x, t), 800,
        {}, [], lambda m: torch.optim.SGD(m.parameters(), lr=0.01), check=(x, t))

    # GELU classifier, cross-entropy, Adam: a new batch of 8 every update.
    gx = torch.randn(200, 8, 16)
    gt = torch.randint(0, 5, (200, 8))
    manifest += write_case(
        out_dir, "gelu_adam", GeluClassifier(), lambda step, micro: (gx[step], gt[step]), 200,
        {"device_iterations": 4}, ["--optimizer", "adam"],
        lambda m: torch.optim.Adam(m.parameters()))

    # Pipelined over 4 IPUs, accumulation 8 x replicas 2 of micro-batch 2 =
    # torch's batch of 32 per update.
    px = torch.randn(4, 32, 6)
    pt = torch.randn(4, 32, 3)
    manifest += write_case(
        out_dir, "pipelined", FourLayers(),
        lambda step, micro: (px[step][:2], pt[step][:2]) if micro else (px[step], pt[step]), 4,
        {"gradient_accumulation_steps": 8, "replication_factor": 2, "device_iterations": 2},
        ["--opt", "lr=0.05,momentum=0.9"],
        lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
        module_map={"fc1": 0, "fc2": 1, "fc3": 2, "fc4": 3})

    # BatchNorm in training mode: running statistics are buffers updated by
    # every micro-batch; accumulation 2 of 4 samples, 2 updates per run.
    bx = torch.randn(20, 8, 8) * 2 + 1
    bt = torch.randn(20, 8, 3)
    manifest += write_case(
        out_dir, "batchnorm", BatchNormMlp(),
        lambda step, micro: (bx[step][:4], bt[step][:4]) if micro else (bx[step], bt[step]), 20,
        {"gradient_accumulation_steps": 2, "device_iterations": 2},
        ["--opt", "lr=0.05,momentum=0.9"],
        lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), accumulation=2)

    # A small CNN, 100 updates of SGD with momentum on 1 IPU (a micro-batch of
    # 4 per update) ...
    cx = torch.randn(100, 4, 3, 8, 8)
    ct = torch.randint(0, 5, (100, 4))
    manifest += write_case(
        out_dir, "cnn_sgd", SmallCnn(), lambda step, micro: (cx[step], ct[step]), 100,
        {"device_iterations": 4}, ["--opt", "lr=0.05,momentum=0.9"],
        lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), buffers=True)
    # ... and of Adam pipelined over 2 IPUs x 2 replicas: each update takes
    # gradient_accumulation_steps 4 x 2 replicas micro-batches of 2, which
    # torch runs in turn (BatchNorm's running statistics see each one).
    ax = torch.randn(100, 16, 3, 8, 8)
    at = torch.randint(0, 5, (100, 16))
    manifest += write_case(
        out_dir, "cnn_adam_pipelined", SmallCnn(),
        lambda step, micro: (ax[step][:2], at[step][:2]) if micro else (ax[step], at[step]), 100,
        {"gradient_accumulation_steps": 4, "replication_factor": 2, "device_iterations": 2},
        ["--optimizer", "adam"], lambda m: torch.optim.Adam(m.parameters()), accumulation=8,
        module_map={"block1": 0, "block2": 1, "head": 1})

    # Param groups whose attributes differ (issue 28), from the CLI's --opt-group.
    nx = torch.randn(40, 8, 8)
    nt = torch.randn(40, 8, 4)
    manifest += write_case(
        out_dir, "layernorm_adamw_groups", NormedRegressor(),
        lambda step, micro: (nx[step], nt[step]), 40, {},
        ["--optimizer", "adamw", "--opt", "lr=0.01,weight_decay=0.1", "--opt-group",
         "fc1.bias,fc2.bias,ln.bias,ln.weight:weight_decay=0"],
        lambda m: torch.optim.AdamW(optimum_groups(m, 0.1), lr=0.01))
    manifest += write_case(
        out_dir, "sgd_two_lrs", NormedRegressor(), lambda step, micro: (nx[step], nt[step]), 40,
        {}, ["--opt", "lr=0.05,momentum=0.9", "--opt-group", "fc2.bias,fc2.weight:lr=0.2"],
        lambda m: torch.optim.SGD([{"params": list(m.fc1.parameters()) + list(m.ln.parameters())},
                                   {"params": m.fc2.parameters(), "lr": 0.2}],
                                  lr=0.05, momentum=0.9))

    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write(manifest)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
