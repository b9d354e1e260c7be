#!/usr/bin/python3
"""PyTorch CPU references for bench/execution_bench and bench/training_bench, measured in
the same run.

Usage: /usr/bin/python3 torch_reference.py COMMAND OUT_DIR [--threads T] [--steps N] [--warmup W]

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
  export-train OUT_DIR [--batches B]
          writes OUT_DIR/mlp_train.onnx: the same seeded MLP returning (logits, loss) with
          loss = cross_entropy(logits, labels), inputs "x" float32 [128, 784] and "labels"
          int64 [128] (opset 14, static shapes), and OUT_DIR/train_x.npy [B*128, 784],
          OUT_DIR/train_labels.npy [B*128] (seeded; B defaults to 8).
  train   trains that model on the CPU from the same initial weights with
          torch.optim.SGD(lr=0.01), batch 128, cycling over OUT_DIR/train_*.npy, with T
          intra-op threads: --warmup W updates (default 24), then N timed updates
          (zero_grad, forward, backward, step). Prints one JSON line:
          {"samples_per_s": ..., "batch": 128, "steps": N, "warmup": W, "threads": T,
           "first_loss": (update 1), "last_loss": (update W+N), "torch": "..."}

  export-resnet OUT_DIR [--batch B]
          writes OUT_DIR/resnet18.onnx: torchvision's ResNet-18 (randomly initialised,
          seeded; nothing is downloaded) in eval mode for a batch of B 224x224 images
          (default 16), and OUT_DIR/resnet_input.npy (one batch).
  infer-resnet OUT_DIR [--batch B] [--steps N] [--threads T]
          times that model's forward pass on the CPU and prints one JSON line as infer.
  matmul  [--threads T] [--steps N] times torch.mm / F.linear for the MLP's matrix
          products (batch 128: 784x1024, 1024x1024, 1024x10) and prints one JSON line:
          {"gflops": {"128x784x1024": ..., ...}, "threads": T, "torch": "..."}

Threads: T cores for torch means T everywhere. Debian's torch runs its matrix products
on OpenBLAS, whose own thread pool ignores torch.set_num_threads: with set_num_threads(1)
it still multiplies on every core, and with set_num_threads(2) OpenMP workers spinning
after each parallel region starve OpenBLAS's threads (measured on 2 cores, MLP training:
6 094 samples/s with 1 thread everywhere, 7 864 with OpenBLAS's default 2 under
set_num_threads(1), 2 912 with both at 2, 9 629 with both at 2 and passive OpenMP
waiting). So before torch loads, OPENBLAS_NUM_THREADS is set to T and OMP_WAIT_POLICY to
PASSIVE (unless the caller set them): the reference is torch at its best on T cores.

Every number printed is measured here; nothing is estimated.
Exits 77 (skip) if torch or numpy is missing.
"""
import json
import os
import sys
import time


def _threads_flag(argv):
    """--threads T from argv, else every CPU (as main() reads it)."""
    for flag, value in zip(argv[3::2], argv[4::2]):
        if flag == "--threads":
            try:
                return int(value)
            except ValueError:
                break
    return os.cpu_count() or 1


# Must happen before `import torch` loads OpenBLAS and libgomp (see the docstring).
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(_threads_flag(sys.argv)))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


class MlpLoss(nn.Module):
    """Mlp (same layers, same seeded weights) returning (logits, loss) for training."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x, labels):
        logits = self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
        return logits, F.cross_entropy(logits, labels)


def make_loss_model():
    torch.manual_seed(0)
    return MlpLoss()


def export_train(out_dir, batches):
    model = make_loss_model()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batches * BATCH, 784, generator=generator)
    labels = torch.randint(0, 10, (batches * BATCH,), generator=generator, dtype=torch.int64)
    torch.onnx.export(model, (x[:BATCH], labels[:BATCH]), os.path.join(out_dir, "mlp_train.onnx"),
                      input_names=["x", "labels"], output_names=["logits", "loss"],
                      opset_version=14, do_constant_folding=False)
    np.save(os.path.join(out_dir, "train_x.npy"), x.numpy())
    np.save(os.path.join(out_dir, "train_labels.npy"), labels.numpy())


def train(out_dir, steps, warmup, threads):
    torch.set_num_threads(threads)
    model = make_loss_model().train()
    x = torch.from_numpy(np.load(os.path.join(out_dir, "train_x.npy")))
    labels = torch.from_numpy(np.load(os.path.join(out_dir, "train_labels.npy")))
    batches = x.shape[0] // BATCH
    xs = [x[i * BATCH:(i + 1) * BATCH].contiguous() for i in range(batches)]
    ls = [labels[i * BATCH:(i + 1) * BATCH].contiguous() for i in range(batches)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def update(i):
        optimizer.zero_grad()
        _, loss = model(xs[i % batches], ls[i % batches])
        loss.backward()
        optimizer.step()
        return loss

    first = update(0).item()
    for i in range(1, warmup):  # warm-up: allocator, thread pool
        update(i)
    loss = None
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        loss = update(i)
    elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": steps * BATCH / elapsed, "batch": BATCH, "steps": steps,
                      "warmup": warmup, "threads": threads, "first_loss": first,
                      "last_loss": loss.item(), "torch": torch.__version__}))


def make_resnet():
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def export_resnet(out_dir, batch):
    model = make_resnet()
    x = torch.randn(batch, 3, 224, 224)
    torch.onnx.export(model, (x,), os.path.join(out_dir, "resnet18.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=13)
    np.save(os.path.join(out_dir, "resnet_input.npy"), x.numpy())


def infer_resnet(batch, steps, threads):
    torch.set_num_threads(threads)
    model = make_resnet()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        for _ in range(2):  # warm-up: oneDNN primitives, allocator, thread pool
            model(x)
        start = time.perf_counter()
        for _ in range(steps):
            model(x)
        elapsed = time.perf_counter() - start
    print(json.dumps({"samples_per_s": steps * batch / elapsed, "batch": batch, "steps": steps,
                      "threads": threads, "torch": torch.__version__}))


MATMUL_SHAPES = ((128, 784, 1024), (128, 1024, 1024), (128, 1024, 10))


def matmul(steps, threads):
    torch.set_num_threads(threads)
    out = {}
    for m, k, n in MATMUL_SHAPES:
        a = torch.randn(m, k)
        w = torch.randn(n, k)
        b = torch.randn(n)
        for _ in range(5):
            F.linear(a, w, b)
        start = time.perf_counter()
        for _ in range(steps):
            F.linear(a, w, b)
        elapsed = time.perf_counter() - start
        out["%dx%dx%d" % (m, k, n)] = 2.0 * m * k * n * steps / elapsed / 1e9
    print(json.dumps({"gflops": out, "steps": steps, "threads": threads,
                      "torch": torch.__version__}))


def main(argv):
    if len(argv) >= 2 and argv[1] == "matmul":
        argv = argv[:2] + [os.getcwd()] + argv[2:]  # no OUT_DIR
    if len(argv) < 3 or argv[1] not in ("export", "export-wide", "infer", "export-train",
                                        "train", "export-resnet", "infer-resnet", "matmul"):
        print(__doc__, file=sys.stderr)
        return 2
    command, out_dir = argv[1], argv[2]
    threads = os.cpu_count() or 1
    steps = 200
    mib = 1024
    batches = 8
    warmup = 24
    batch = 16
    rest = argv[3:]
    for flag, value in zip(rest[::2], rest[1::2]):
        if flag == "--threads":
            threads = int(value)
        elif flag == "--steps":
            steps = int(value)
        elif flag == "--mib":
            mib = int(value)
        elif flag == "--batches":
            batches = int(value)
        elif flag == "--warmup":
            warmup = max(1, int(value))
        elif flag == "--batch":
            batch = int(value)
        else:
            print("unknown flag %s" % flag, file=sys.stderr)
            return 2
    os.makedirs(out_dir, exist_ok=True)
    if command == "export":
        export(out_dir)
    elif command == "export-wide":
        export_wide(out_dir, mib)
    elif command == "export-train":
        export_train(out_dir, batches)
    elif command == "train":
        train(out_dir, steps, warmup, threads)
    elif command == "export-resnet":
        export_resnet(out_dir, batch)
    elif command == "infer-resnet":
        infer_resnet(batch, steps, threads)
    elif command == "matmul":
        matmul(steps, threads)
    else:
        infer(steps, threads)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
