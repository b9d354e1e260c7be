#!/usr/bin/python3
"""Builds the parity models and their reference outputs for tests/graph/onnx_parity_test.

Usage: /usr/bin/python3 make_models.py OUT_DIR
       /usr/bin/python3 make_models.py OUT_DIR --step NAME MICRO_BATCHES

For each model NAME this writes, into OUT_DIR:
  NAME.onnx            the model, exported by torch.onnx.export with static shapes
  NAME.in<i>.npy       the i-th graph input (graph input order)
  NAME.out<i>.npy      torch's i-th output for those inputs (eager mode, fp32)
and one line "NAME OPSET NUM_INPUTS NUM_OUTPUTS" per model in OUT_DIR/manifest.txt.

With --step (for tests/runtime/parity_test), only model NAME, as one host
step of MICRO_BATCHES micro-batches:
  NAME.onnx            as above (one micro-batch per run)
  NAME.step_in.npz     numpy.savez: in<i> = MICRO_BATCHES fresh micro-batches of
                       input i, concatenated along dim 0 (PopTorch's host layout)
  NAME.step_out.npz    numpy.savez_compressed: out<i> = torch's output i of each
                       micro-batch run on its own, concatenated in the same order

Everything is seeded (torch.manual_seed) so reruns write identical files.
Exits with status 77 (the conventional "skip") if torch or numpy is missing.
"""
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the C++ test turns this into GTEST_SKIP
    print("make_models.py: cannot import torch/numpy: %s" % e, file=sys.stderr)
    sys.exit(77)


class Mlp(nn.Module):
    """The classic 784-1024-1024-10 MNIST MLP."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class GeluClassifier(nn.Module):
    """Linear/GELU stack with a softmax and a log-softmax head (two outputs)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
            nn.Dropout(0.1), nn.Linear(128, 5))

    def forward(self, x):
        logits = self.layers(x)
        return F.softmax(logits, dim=-1), F.log_softmax(logits, dim=-1)


class CausalSelfAttention(nn.Module):
    """Hand-written multi-head attention; x.size() feeds the reshapes, so the
    export carries Shape/Gather/Concat chains that the importer must fold."""

    def __init__(self, d_model, n_head, max_len):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len)))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_head, max_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, max_len)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGpt(nn.Module):
    """GPT-style decoder: token + position embeddings, causal blocks, tied-free head."""

    def __init__(self, vocab=50, d_model=32, n_head=4, n_layer=2, max_len=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_len, d_model)
        self.h = nn.ModuleList([Block(d_model, n_head, max_len) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0).expand(b, t)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class MhaEncoder(nn.Module):
    """nn.MultiheadAttention + nn.LayerNorm encoder with mean pooling and a
    log-softmax head. Exported at opset 17, where LayerNorm becomes
    LayerNormalization."""

    def __init__(self, vocab=40, d_model=32, n_head=4, n_layer=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.attn = nn.ModuleList(
            [nn.MultiheadAttention(d_model, n_head, batch_first=True) for _ in range(n_layer)])
        self.norm1 = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layer)])
        self.ff = nn.ModuleList([
            nn.Sequential(nn.Linear(d_model, 64), nn.ReLU(), nn.Linear(64, d_model))
            for _ in range(n_layer)])
        self.norm2 = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layer)])
        self.head = nn.Linear(d_model, 3)

    def forward(self, tokens):
        x = self.embed(tokens)
        for attn, n1, ff, n2 in zip(self.attn, self.norm1, self.ff, self.norm2):
            a, _ = attn(x, x, x, need_weights=False)
            x = n1(x + a)
            x = n2(x + ff(x))
        return F.log_softmax(self.head(x.mean(dim=1)), dim=-1)


class BatchNormNet(nn.Module):
    """Eval-mode BatchNorm2d on the input and BatchNorm1d after a Linear, with
    random running statistics and affine parameters (BatchNormalization with
    training_mode=0)."""

    def __init__(self):
        super().__init__()
        self.bn_in = nn.BatchNorm2d(3)
        self.fc1 = nn.Linear(3 * 5 * 5, 16)
        self.bn1 = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)
        with torch.no_grad():
            for bn in (self.bn_in, self.bn1):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        x = self.bn_in(x).flatten(1)
        return self.fc2(F.relu(self.bn1(self.fc1(x))))


class SmallCnn(nn.Module):
    """Two conv blocks (eval-mode BatchNorm, which the exporter folds into the
    convolution), max and average pooling with ceil_mode, ReLU6 (Clip) and a
    linear head."""

    def __init__(self):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                    nn.MaxPool2d(2))
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
                                    nn.BatchNorm2d(16), nn.ReLU6(),
                                    nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False))
        self.head = nn.Linear(16 * 2 * 2, 5)
        with torch.no_grad():
            for bn in (self.block1[1], self.block2[1]):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.head(self.block2(self.block1(x)).flatten(1))


class ConvVariety(nn.Module):
    """Conv1d with stride and dilation; grouped, depthwise and dilated Conv2d;
    padded, dilated max pooling with ceil_mode; padded average pooling that
    counts its padding; global average pooling."""

    def __init__(self):
        super().__init__()
        self.conv1d = nn.Conv1d(4, 6, 5, stride=2, padding=2, dilation=2)
        self.grouped = nn.Conv2d(6, 8, (3, 2), groups=2, padding=(1, 0))
        self.depthwise = nn.Conv2d(8, 8, 3, groups=8, padding=1, bias=False)
        self.dilated = nn.Conv2d(8, 4, 3, dilation=2, padding=2, stride=(1, 2))
        self.max_pool = nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)
        self.avg_pool = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=True)

    def forward(self, x):
        a = F.relu(self.conv1d(x))                       # [N, 6, 12]
        b = a.unsqueeze(-1).expand(-1, -1, -1, 6)         # [N, 6, 12, 6]
        b = self.depthwise(self.grouped(b))
        c = self.dilated(F.relu(b))
        return self.max_pool(c), self.avg_pool(c), F.adaptive_avg_pool2d(c, 1)


class HardActivations(nn.Module):
    """MobileNetV3's activations: Hardswish and Hardsigmoid (ONNX HardSwish from
    opset 14, HardSigmoid with alpha 1/6)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return F.hardsigmoid(self.fc2(F.hardswish(self.fc1(x) * 4)))


class Fmod(nn.Module):
    """torch.fmod (ONNX Mod with fmod=1) by a scalar and elementwise."""

    def forward(self, x, y):
        return torch.fmod(x * 5, 1.5), torch.fmod(x * 5, y + 1.5)


class SerializedLookup(nn.Module):
    """A word embedding looked up in two vocabulary slices with masked ids, as
    optimum-graphcore's SerializedEmbedding does (GreaterOrEqual, Less, And, Cast, Mul),
    plus LessOrEqual and Or on the same ids and a float comparison."""

    def __init__(self):
        super().__init__()
        self.vocab, self.slices = 50, 2
        self.rows = self.vocab // self.slices
        self.tables = nn.ModuleList(nn.Embedding(self.rows, 8) for _ in range(self.slices))

    def forward(self, ids):
        total = None
        for i, table in enumerate(self.tables):
            local = ids - i * self.rows
            mask = (local >= 0) * (local < self.rows)
            x = table(local * mask) * mask.unsqueeze(-1)
            total = x if total is None else total + x
        edges = ((ids <= 3) | (ids >= self.vocab - 3)).float()
        return total, edges, (total >= 0.5).float()


def models():
    """(name, module, example inputs, opset) for every parity model."""
    torch.manual_seed(1)
    yield "mlp", Mlp(), (torch.randn(4, 784),), 14
    torch.manual_seed(1)
    yield "gelu_classifier", GeluClassifier(), (torch.randn(6, 64),), 14
    torch.manual_seed(1)
    yield "tiny_gpt", TinyGpt(), (torch.randint(0, 50, (2, 8)),), 14
    torch.manual_seed(1)
    yield "tiny_gpt_opset17", TinyGpt(), (torch.randint(0, 50, (2, 8)),), 17
    torch.manual_seed(1)
    yield "mha_encoder", MhaEncoder(), (torch.randint(0, 40, (3, 7)),), 17
    torch.manual_seed(1)
    yield "batchnorm_eval", BatchNormNet(), (torch.randn(4, 3, 5, 5),), 14
    torch.manual_seed(1)
    yield "small_cnn", SmallCnn(), (torch.randn(2, 3, 16, 16),), 13
    torch.manual_seed(1)
    yield "conv_variety", ConvVariety(), (torch.randn(2, 4, 24),), 13
    torch.manual_seed(1)
    yield "hard_activations", HardActivations(), (torch.randn(8, 16),), 14
    torch.manual_seed(1)
    yield "fmod", Fmod(), (torch.randn(4, 5), torch.rand(4, 5)), 13
    torch.manual_seed(1)
    ids = torch.tensor([[0, 3, 24, 25, 26, 47, 49, 12]])
    yield "serialized_lookup", SerializedLookup(), (ids.repeat(2, 1),), 14


def run(module, inputs):
    """torch's outputs (a tuple) in eval mode."""
    module.eval()
    with torch.no_grad():
        outputs = module(*inputs)
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)


def export(module, inputs, outputs, opset, path):
    torch.onnx.export(module, inputs, path, opset_version=opset,
                      input_names=["in%d" % i for i in range(len(inputs))],
                      output_names=["out%d" % i for i in range(len(outputs))])


def like(t):
    """A fresh seeded tensor shaped like example input t."""
    if t.is_floating_point():
        return torch.randn(t.shape)
    return torch.randint(0, int(t.max()) + 1, t.shape, dtype=t.dtype)


def write_step(out_dir, name, micro_batches):
    for model_name, module, inputs, opset in models():
        if model_name != name:
            continue
        outputs = run(module, inputs)
        export(module, inputs, outputs, opset, os.path.join(out_dir, name + ".onnx"))
        torch.manual_seed(2)
        batches = [tuple(like(t) for t in inputs) for _ in range(micro_batches)]
        results = [run(module, b) for b in batches]
        np.savez(os.path.join(out_dir, name + ".step_in.npz"),
                 **{"in%d" % i: torch.cat([b[i] for b in batches]).numpy()
                    for i in range(len(inputs))})
        np.savez_compressed(os.path.join(out_dir, name + ".step_out.npz"),
                            **{"out%d" % i: torch.cat([r[i] for r in results]).numpy()
                               for i in range(len(outputs))})
        return
    sys.exit("make_models.py: no model named %s" % name)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    if len(sys.argv) == 5 and sys.argv[2] == "--step":
        write_step(out_dir, sys.argv[3], int(sys.argv[4]))
        return
    lines = []
    for name, module, inputs, opset in models():
        outputs = run(module, inputs)
        export(module, inputs, outputs, opset, os.path.join(out_dir, name + ".onnx"))
        for i, t in enumerate(inputs):
            np.save(os.path.join(out_dir, "%s.in%d.npy" % (name, i)), t.numpy())
        for i, t in enumerate(outputs):
            np.save(os.path.join(out_dir, "%s.out%d.npy" % (name, i)), t.numpy())
        lines.append("%s %d %d %d\n" % (name, opset, len(inputs), len(outputs)))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
