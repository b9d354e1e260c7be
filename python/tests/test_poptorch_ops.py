"""PopTorch's ops (seed 003, sections 4.6.2, 4.6.5-4.6.7) and training-mode Dropout
through ``ipupod.poptorch`` against a private ipupodd, each checked against torch on the CPU.

Lines between ``# seed begin`` and ``# seed end`` are the seed's, unchanged."""

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod.poptorch as poptorch  # noqa: E402


# seed begin (4.6.2; `poptorch` is ipupod.poptorch)
class ExampleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x):
        x = x + 1

        # It is important to make sure the result of the print is used.
        x = poptorch.ipu_print_tensor(x)

        return x + self.bias
# seed end


@pytest.mark.ipupod(pod="POD4")
def test_4_6_2_ipu_print_tensor_prints_each_run_to_the_output_and_the_server_log(
        server, capsys):
    model = ExampleModel()
    x = torch.tensor([[1.0, 2.0], [3.0, -4.5]])
    poptorch_model = poptorch.inferenceModel(model)
    for _ in range(2):
        torch.testing.assert_close(poptorch_model(x), model(x), rtol=0, atol=0)
    printed = [line for line in capsys.readouterr().out.splitlines() if "float32[2, 2]" in line]
    assert len(printed) == 2, printed
    assert printed[0].endswith("float32[2, 2] [2, 3, 4, -3.5]"), printed
    # The server logs a print after the run's reply has gone: wait (bounded) for the line.
    deadline = time.monotonic() + 10
    while "print user=poptorch-user" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "print user=poptorch-user" in server.log()
    assert "[2, 3, 4, -3.5]" in server.log()
    poptorch_model.destroy()


class PrintedRegression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x, target):
        y = poptorch.nop(poptorch.ipu_print_tensor(self.fc(x), "fc"))
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.ipupod(pod="POD4")
def test_4_6_2_and_4_6_5_print_and_nop_train_as_identities_and_print_the_gradient(
        server, capsys):
    torch.manual_seed(3)
    model, reference = PrintedRegression(), PrintedRegression()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(4, 3), torch.randn(4, 2)
    poptorch_model = poptorch.trainingModel(model, optimizer=torch.optim.SGD(
        model.parameters(), lr=0.1))
    cpu = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        _, loss = poptorch_model(x, target)
        cpu.zero_grad()
        # torch itself, no ipupod op on the CPU side
        cpu_loss = torch.nn.functional.mse_loss(reference.fc(x), target)
        cpu_loss.backward()
        cpu.step()
    torch.testing.assert_close(loss, cpu_loss.detach(), rtol=1e-5, atol=1e-6)
    poptorch_model.copyWeightsToHost()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight, rtol=1e-5, atol=1e-6)
    out = capsys.readouterr().out
    assert out.count("fc: float32[4, 2] [") == 3, out
    assert out.count("fc_gradient: float32[4, 2] [") == 3, out
    poptorch_model.destroy()


class Window(torch.nn.Module):
    """dynamic_slice and dynamic_update of a parameter at a runtime start."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.arange(24.0).reshape(2, 12) / 10)

    def forward(self, start, x):
        x = x.reshape(2, 3)  # one sample per micro-batch
        window = poptorch.dynamic_slice(self.table, 1, start, 3, 2)  # columns s, s+2, s+4
        updated = poptorch.dynamic_update(self.table, window * x, 1, start, 3)
        return window, updated


def window_reference(table, start, x):
    """The same with torch's own indexing."""
    s, x = int(start), x.reshape(2, 3)
    window = table[:, s:s + 5:2]
    updated = table.clone()
    updated[:, s:s + 3] = window * x
    return window, updated


@pytest.mark.ipupod(pod="POD4")
def test_4_6_6_and_4_6_7_dynamic_slice_and_update_read_the_start_at_run_time(server):
    model = Window()
    opts = poptorch.Options().deviceIterations(3)  # one start per micro-batch
    poptorch_model = poptorch.inferenceModel(model, opts)
    starts = torch.tensor([0, 7, 3])
    x = torch.rand(3, 2, 3)  # micro-batches of [1, 2, 3]
    window, updated = poptorch_model(starts, x)
    for i in range(3):
        want_window, want_updated = window_reference(model.table.detach(), starts[i], x[i])
        torch.testing.assert_close(window[2 * i:2 * i + 2], want_window, rtol=0, atol=0)
        torch.testing.assert_close(updated[2 * i:2 * i + 2], want_updated, rtol=0, atol=0)
    with pytest.raises(poptorch.Error) as raised:
        poptorch_model(torch.tensor([0, 8, 3]), x)  # 8 + 4 runs past the 12 columns
    assert "start 8 on axis 1 is out of range" in str(raised.value)
    assert "starts in [0, 7]" in str(raised.value)
    with pytest.raises(ValueError, match="start 8 on dim 1 is out of range"):
        model(torch.tensor([8]), x[0])  # the CPU refuses the same
    poptorch_model.destroy()


class WindowLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.window = Window()

    def forward(self, start, x, target):
        window, updated = self.window(start, x)
        return window, (window - target.reshape(2, 3)).pow(2).mean() + updated.pow(2).mean()


@pytest.mark.ipupod(pod="POD4")
def test_dynamic_slice_and_update_train_as_torch_indexing_does(server):
    model, reference = WindowLoss(), Window()
    reference.load_state_dict(model.window.state_dict())
    poptorch_model = poptorch.trainingModel(model, optimizer=torch.optim.SGD(
        model.parameters(), lr=0.5))
    cpu = torch.optim.SGD(reference.parameters(), lr=0.5)
    torch.manual_seed(4)
    for start in (1, 6, 0):
        s, x, target = torch.tensor([start]), torch.rand(1, 2, 3), torch.rand(1, 2, 3)
        _, loss = poptorch_model(s, x, target)
        cpu.zero_grad()
        window, updated = window_reference(reference.table, s, x)
        cpu_loss = (window - target.reshape(2, 3)).pow(2).mean() + updated.pow(2).mean()
        cpu_loss.backward()
        cpu.step()
        torch.testing.assert_close(loss, cpu_loss.detach(), rtol=1e-5, atol=1e-6)
    poptorch_model.copyWeightsToHost()
    torch.testing.assert_close(model.window.table, reference.table, rtol=1e-5, atol=1e-6)
    poptorch_model.destroy()


class DropoutRegression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 256)
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x, target):
        hidden = self.drop(torch.tanh(self.fc(x)))
        return hidden, torch.nn.functional.mse_loss(hidden.sum(1), target)


def train_dropout(seed, steps=3):
    torch.manual_seed(0)
    model = DropoutRegression()
    opts = poptorch.Options()
    if seed is not None:
        opts.randomSeed(seed)
    poptorch_model = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(
        model.parameters(), lr=0.01))
    x, target = torch.randn(8, 16), torch.randn(8)
    hidden = []
    losses = []
    for _ in range(steps):
        h, loss = poptorch_model(x, target)
        hidden.append(h)
        losses.append(loss)
    poptorch_model.copyWeightsToHost()
    poptorch_model.destroy()
    return model, x, hidden, torch.stack(losses)


@pytest.mark.ipupod(pod="POD4")
def test_dropout_trains_with_torchs_mask_statistics_and_repeats_per_seed(server):
    model, x, hidden, losses = train_dropout(7)
    # The mask rate is near the ratio, and kept values are scaled exactly as torch does.
    torch.manual_seed(0)
    initial = DropoutRegression()
    clean = torch.tanh(initial.fc(x)).detach()
    dropped = hidden[0] == 0
    rate = dropped.float().mean().item()
    assert abs(rate - 0.25) < 0.03, rate  # 2048 elements: sd 0.0096
    torch.testing.assert_close(hidden[0][~dropped], clean[~dropped] * (1 / (1 - 0.25)),
                               rtol=1e-5, atol=1e-6)
    torch_rate = (torch.nn.functional.dropout(torch.ones(2048), 0.25) == 0).float().mean()
    assert abs(rate - torch_rate.item()) < 0.06
    assert not torch.equal(hidden[0] == 0, hidden[1] == 0), "each step draws a new mask"
    again_model, _, again_hidden, again_losses = train_dropout(7)
    assert torch.equal(losses, again_losses)
    assert torch.equal(model.fc.weight, again_model.fc.weight)
    other_model, _, _, other_losses = train_dropout(8)
    assert not torch.equal(losses, other_losses)
    assert not torch.equal(model.fc.weight, other_model.fc.weight)


class DropoutGradient(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 64))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.w * x)
        return y, poptorch.identity_loss(y.sum(), reduction="none")


@pytest.mark.ipupod(pod="POD4")
def test_dropout_gradient_is_zero_exactly_where_the_forward_is(server):
    model = DropoutGradient()
    before = model.w.detach().clone()
    opts = poptorch.Options().randomSeed(1)
    poptorch_model = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(
        model.parameters(), lr=1.0))
    y, _ = poptorch_model(torch.ones(1, 64))
    poptorch_model.copyWeightsToHost()
    step = before - model.w.detach()  # lr 1: the gradient itself
    zero = y[0] == 0
    assert zero.any() and (~zero).any()
    assert torch.equal(step[zero], torch.zeros(int(zero.sum())))
    torch.testing.assert_close(step[~zero], torch.full((int((~zero).sum()),), 2.0), rtol=0,
                               atol=1e-6)
    poptorch_model.destroy()
