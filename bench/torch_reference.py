#!/usr/bin/python3
"""PyTorch CPU references for bench/execution_bench, measured in the same run.

Usage: /usr/bin/python3 torch_reference.py COMMAND OUT_DIR [--threads T] [--steps N]

  export  writes OUT_DIR/mlp.onnx: the MLP 784-1024-1024-10 at batch 128 (seeded),
          exported with static shapes as torch.onnx.export writes it, and
          OUT_DIR/mlp_input.npy (one batch of inputs).
  export-wide OUT_DIR --mib M
          writes OUT_DIR/wide.onnx: four bias-free Linear(n, n) layers named layers.0-3
          holding M MiB of float32 weights in all (for the weight-transfer benchmark;
          one layer per IPU with layers_per_ipu [1 1 1 1]), and OUT_DIR/wide_input.npy.
  infer   times the same model's forward pass (torch.no_grad, eval) on the CPU with
          T intra-op threads and prints one JSON line:
          {"samples_per_s": ..., "batch": 128, "steps": N, "threads": T, "torch": "..."}

Every number printed is measured here; nothing is estimated.
Exits 77 (skip) if torch or numpy is missing.
"""
import json
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("torch_reference.py: cannot import torch/numpy: %s" % e, file=sys.stderr)
    sys.exit(77)

BATCH = 128


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def make_model():
    torch.manual_seed(0)
    return Mlp().eval()


def export(out_dir):
    model = make_model()
    x = torch.randn(BATCH, 784)
    torch.onnx.export(model, (x,), os.path.join(out_dir, "mlp.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=13)
    np.save(os.path.join(out_dir, "mlp_input.npy"), x.numpy())


class Wide(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(n, n, bias=False) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def export_wide(out_dir, mib):
    n = int((mib * (1 << 20) / 4 / 4) ** 0.5)
    torch.manual_seed(0)
    model = Wide(n).eval()
    x = torch.randn(1, n)
    torch.onnx.export(model, (x,), os.path.join(out_dir, "wide.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=13)
    np.save(os.path.join(out_dir, "wide_input.npy"), x.numpy())


def infer(steps, threads):
    torch.set_num_threads(threads)
    model = make_model()
    x = torch.randn(BATCH, 784)
    with torch.no_grad():
        for _ in range(5):  # warm-up: allocator, thread pool
            model(x)
        start = time.perf_counter()
        for _ in range(steps):
            model(x)
        elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": steps * BATCH / elapsed, "batch": BATCH, "steps": steps,
                      "threads": threads, "torch": torch.__version__}))


def main(argv):
    if len(argv) < 3 or argv[1] not in ("export", "export-wide", "infer"):
        print(__doc__, file=sys.stderr)
        return 2
    command, out_dir = argv[1], argv[2]
    threads = os.cpu_count() or 1
    steps = 200
    mib = 1024
    rest = argv[3:]
    for flag, value in zip(rest[::2], rest[1::2]):
        if flag == "--threads":
            threads = int(value)
        elif flag == "--steps":
            steps = int(value)
        elif flag == "--mib":
            mib = int(value)
        else:
            print("unknown flag %s" % flag, file=sys.stderr)
            return 2
    os.makedirs(out_dir, exist_ok=True)
    if command == "export":
        export(out_dir)
    elif command == "export-wide":
        export_wide(out_dir, mib)
    else:
        infer(steps, threads)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
