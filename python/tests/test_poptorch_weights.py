"""Weights always stay weights (issue 28, part 1): for every model shape that torch.onnx
exports with a parameter folded, merged or tied, a change of every parameter on the host
reaches the device - through ``copyWeightsToDevice()``, the implicit copy from a training
model to its inference model, and ``ipupod run --weights`` / ``--save-weights`` - and the
outputs equal torch's on the CPU.

Each shape is one torch module; every test changes *every* parameter (not only one), so a
parameter that silently stayed at its exported value fails the comparison."""

import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.testing import find_binary  # noqa: E402


class Rank3Linear(torch.nn.Module):
    """A Linear applied to [batch, seq, features], as in every transformer."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x):
        return self.fc(x)


class EqualLayerNorms(torch.nn.Module):
    """Two LayerNorms freshly initialised: their parameters are equal at export."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(6), torch.nn.LayerNorm(6)
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        return self.ln2(self.fc(self.ln1(x)))


class ConstantPositions(torch.nn.Module):
    """An embedding looked up at constant positions, ``pos(torch.arange(n))``."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(8, 6)

    def forward(self, x):
        return x + self.pos(torch.arange(x.shape[1]))


class TiedHead(torch.nn.Module):
    """A token embedding and an LM head sharing one weight, as GPT-2's."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.wte.weight
        self.scale = torch.nn.Parameter(torch.ones(()))  # a scalar parameter

    def forward(self, ids):
        return self.head(self.wte(ids) * self.scale)


class ConvBatchNorm(torch.nn.Module):
    """A Conv followed by a BatchNorm in eval mode, which torch.onnx fuses."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(x))


SHAPES = {
    "rank3_linear": (Rank3Linear, lambda: torch.randn(2, 4, 6)),
    "equal_layernorms": (EqualLayerNorms, lambda: torch.randn(2, 3, 6)),
    "constant_positions": (ConstantPositions, lambda: torch.randn(2, 5, 6)),
    "tied_head": (TiedHead, lambda: torch.randint(0, 11, (2, 5))),
    "conv_batchnorm": (ConvBatchNorm, lambda: torch.randn(2, 2, 6, 6)),
}


def change_every_parameter(model):
    """New values for every parameter and float buffer (distinct, so nothing stays equal;
    variances stay positive)."""
    with torch.no_grad():
        for index, (name, tensor) in enumerate(model.state_dict().items()):
            if tensor.is_floating_point():
                tensor.copy_(torch.randn_like(tensor) * 0.5 + 0.1 * (index + 1))
                if name.endswith("running_var"):
                    tensor.abs_().add_(0.5)


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_copy_weights_to_device_reaches_every_parameter(server, shape):
    make, example = SHAPES[shape]
    torch.manual_seed(3)
    model = make().eval()
    x = example()
    inference = poptorch.inferenceModel(model)
    torch.testing.assert_close(inference(x), model(x), rtol=1e-5, atol=1e-5)
    change_every_parameter(model)
    inference.copyWeightsToDevice()
    torch.testing.assert_close(inference(x), model(x), rtol=1e-5, atol=1e-5)
    inference.copyWeightsToHost()  # reads back what the device holds: the changed values
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.zero_()
    inference.copyWeightsToHost()
    for name, value in expected.items():
        if value.is_floating_point():
            torch.testing.assert_close(model.state_dict()[name], value, msg=name)
    inference.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_a_tied_weight_written_by_either_name_reaches_both_uses(server):
    torch.manual_seed(4)
    model = TiedHead().eval()
    ids = torch.randint(0, 11, (2, 5))
    inference = poptorch.inferenceModel(model)
    inference(ids)
    assert inference._exported.aliases == {"head.weight": "wte.weight"}
    with torch.no_grad():
        model.head.weight.mul_(-2.0)  # one tensor: wte.weight changes too
    inference.copyWeightsToDevice()
    torch.testing.assert_close(inference(ids), model(ids), rtol=1e-5, atol=1e-5)
    inference.destroy()


class TinyGpt(torch.nn.Module):
    """A GPT-2-like model with Hugging Face's module names: token and position embeddings,
    pre-LayerNorm blocks with attention and an MLP (Conv1D-like Linear layers applied to
    rank-3 inputs), a final LayerNorm and an LM head tied to the token embedding."""

    def __init__(self, vocab=13, positions=8, width=8, layers=2):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(positions, width)
        self.h = torch.nn.ModuleList(Block(width) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(width)
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, labels=None):
        h = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]))
        for block in self.h:
            h = block(h)
        logits = self.lm_head(self.ln_f(h))
        if labels is None:
            return logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
        return logits, loss


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(width)
        self.c_attn = torch.nn.Linear(width, 3 * width)
        self.c_proj = torch.nn.Linear(width, width)
        self.ln_2 = torch.nn.LayerNorm(width)
        self.mlp_fc = torch.nn.Linear(width, 2 * width)
        self.mlp_proj = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        q, k, v = self.c_attn(self.ln_1(x)).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.c_proj(attention @ v)
        return x + self.mlp_proj(torch.nn.functional.gelu(self.mlp_fc(self.ln_2(x))))


@pytest.mark.ipupod(pod="POD4")
def test_a_tied_gpt_trained_then_validated_equals_torch(server):
    torch.manual_seed(5)
    model, reference = TinyGpt(), TinyGpt()
    reference.load_state_dict(model.state_dict())
    ids, labels = torch.randint(0, 13, (4, 6)), torch.randint(0, 13, (4, 6))
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(),
                                                                       lr=0.2))
    model.eval()
    validation = poptorch.inferenceModel(model)
    model.train()
    cpu = torch.optim.SGD(reference.parameters(), lr=0.2)
    for _ in range(3):
        training(ids, labels)
        cpu.zero_grad()
        reference(ids, labels)[1].backward()
        cpu.step()
    reference.eval()
    with torch.no_grad():
        expected = reference(ids)
    # the implicit copy from the training model to the inference model
    torch.testing.assert_close(validation(ids), expected, rtol=1e-4, atol=1e-5)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-4, atol=1e-5,
                                   msg=name)
    training.destroy()
    validation.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_a_frozen_parameter_changed_on_the_host_is_an_error_not_ignored(server):
    torch.manual_seed(6)

    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.fc.bias.requires_grad_(False)

        def forward(self, x, target):
            out = self.fc(x)
            return out, ((out - target) ** 2).mean()

    model = Frozen()
    training = poptorch.trainingModel(model)
    x, target = torch.randn(2, 4), torch.randn(2, 4)
    training(x, target)
    training.copyWeightsToHost()
    with torch.no_grad():
        model.fc.bias.add_(1.0)
    with pytest.raises(poptorch.Error, match="fc.bias changed on the host"):
        training.copyWeightsToDevice()
    training.destroy()


def _export_eval(module, example, path):
    module.eval()
    torch.onnx.export(module, (example,), path, input_names=["x"], output_names=["y"],
                      opset_version=14, do_constant_folding=False)


def _cli(server, *args):
    done = subprocess.run([find_binary("ipupod", "IPUPOD_CLI_BINARY"), "--server",
                           server.address, "--user", "poptorch-user", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("shape", ["rank3_linear", "equal_layernorms", "constant_positions"])
def test_cli_run_weights_and_save_weights_reach_every_parameter(server, tmp_path, shape):
    make, example = SHAPES[shape]
    torch.manual_seed(7)
    model, x = make(), example()
    onnx_path, ipx = str(tmp_path / "m.onnx"), str(tmp_path / "m.ipx")
    _export_eval(model, x, onnx_path)
    _cli(server, "compile", onnx_path, "-o", ipx)
    change_every_parameter(model)
    weights, inputs = str(tmp_path / "w.npz"), str(tmp_path / "x.npz")
    np.savez(weights, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    np.savez(inputs, x=x.numpy())
    outputs, saved = str(tmp_path / "y.npz"), str(tmp_path / "saved.npz")
    _cli(server, "run", ipx, "--inputs", inputs, "--outputs", outputs, "--weights", weights,
         "--save-weights", saved)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(np.load(outputs)["y"], expected, rtol=1e-5, atol=1e-5)
    stored = np.load(saved)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(stored[name], value.detach().numpy(), err_msg=name)


@pytest.mark.ipupod(pod="POD4")
def test_cli_compile_names_what_the_exporter_folded(server, tmp_path):
    torch.manual_seed(8)
    model, x = Rank3Linear().eval(), torch.randn(2, 4, 6)
    path = str(tmp_path / "folded.onnx")
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                      opset_version=14, do_constant_folding=True)
    done = _cli(server, "compile", path, "-o", str(tmp_path / "folded.ipx"))
    assert "onnx::MatMul" in done.stderr and "do_constant_folding=False" in done.stderr, \
        done.stderr
    assert os.path.exists(tmp_path / "folded.ipx")


@pytest.mark.ipupod(pod="POD4")
def test_cli_takes_a_tied_weight_by_either_name_and_refuses_two_values(server, tmp_path):
    from ipupod.poptorch import blocks, export
    torch.manual_seed(9)
    model, ids = TiedHead().eval(), torch.randint(0, 11, (2, 5))
    exported = export.export(model, (ids,), ["x"], False, blocks.PipelinedExecution())
    onnx_path, ipx = tmp_path / "tied.onnx", str(tmp_path / "tied.ipx")
    onnx_path.write_bytes(exported.onnx)
    _cli(server, "compile", str(onnx_path), "-o", ipx)
    inspected = _cli(server, "--json", "inspect", ipx).stdout
    assert '"tied_to":"wte.weight"' in inspected.replace(" ", ""), inspected
    change_every_parameter(model)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    inputs, outputs = str(tmp_path / "x.npz"), str(tmp_path / "y.npz")
    np.savez(inputs, x=ids.numpy())
    head_only = {k: v for k, v in state.items() if k != "wte.weight"}  # the tie's other name
    np.savez(tmp_path / "w.npz", **head_only)
    saved = str(tmp_path / "saved.npz")
    _cli(server, "run", ipx, "--inputs", inputs, "--outputs", outputs, "--weights",
         str(tmp_path / "w.npz"), "--save-weights", saved)
    with torch.no_grad():
        np.testing.assert_allclose(np.load(outputs)[exported.outputs[0]], model(ids).numpy(),
                                   rtol=1e-5, atol=1e-5)
    stored = np.load(saved)
    np.testing.assert_array_equal(stored["head.weight"], stored["wte.weight"])
    np.testing.assert_array_equal(stored["wte.weight"], state["wte.weight"])
    state["head.weight"] = state["head.weight"] + 1.0
    np.savez(tmp_path / "bad.npz", **state)
    done = subprocess.run([find_binary("ipupod", "IPUPOD_CLI_BINARY"), "--server",
                           server.address, "--user", "poptorch-user", "run", ipx, "--inputs",
                           inputs, "--outputs", outputs, "--weights",
                           str(tmp_path / "bad.npz")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "are one tensor in the model" in done.stderr, done.stderr
