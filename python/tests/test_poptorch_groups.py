"""Optimizer param groups whose hyperparameters differ (issue 28), through ipupod.poptorch
against torch on the CPU: Hugging Face / optimum's AdamW grouping (no weight decay on biases
and LayerNorm weights), SGD with two learning rates and ``setOptimizer`` changing one group's,
and the PopTorch attributes that must be equal in every group."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod.poptorch as poptorch  # noqa: E402

# The existing training parity tests' tolerance (test_poptorch.py's SGD cases).
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture
def server(ipupod_server, monkeypatch):
    """The private ipupodd as the front end finds it: ``$IPUPOD_SERVER``."""
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "groups-user")
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)
    monkeypatch.delenv("POPTORCH_WAIT_FOR_IPU", raising=False)
    return ipupod_server


class NormedRegressor(torch.nn.Module):
    """Linear, LayerNorm, ReLU, Linear; MSE loss."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x, target):
        y = self.fc2(torch.relu(self.ln(self.fc1(x))))
        return y, torch.nn.functional.mse_loss(y, target)


def optimum_groups(model, weight_decay):
    """transformers' Trainer (and optimum-graphcore's IPUTrainer): weight decay on every
    weight but biases and LayerNorm weights."""
    no_decay = [n for n, _ in model.named_parameters() if n.endswith("bias") or n.startswith("ln.")]
    return [
        {"params": [p for n, p in model.named_parameters() if n not in no_decay],
         "weight_decay": weight_decay},
        {"params": [p for n, p in model.named_parameters() if n in no_decay],
         "weight_decay": 0.0},
    ]


def twins(seed):
    torch.manual_seed(seed)
    model, reference = NormedRegressor(), NormedRegressor()
    reference.load_state_dict(model.state_dict())
    return model, reference


def cpu_step(model, optimizer, x, target):
    optimizer.zero_grad()
    _, loss = model(x, target)
    loss.backward()
    optimizer.step()
    return loss.detach()


def assert_same_weights(model, reference):
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("make", [
    lambda groups: torch.optim.AdamW(groups, lr=1e-2),
    lambda groups: poptorch.optim.AdamW(groups, lr=1e-2),
], ids=["torch", "poptorch"])
def test_adamw_without_decay_on_biases_and_layernorm_trains_as_torch(server, make):
    model, reference = twins(28)
    x, target = torch.randn(6, 8), torch.randn(6, 4)
    poptorch_model = poptorch.trainingModel(model, optimizer=make(optimum_groups(model, 0.1)))
    cpu = torch.optim.AdamW(optimum_groups(reference, 0.1), lr=1e-2)
    for step in range(8):
        _, loss = poptorch_model(x, target)
        cpu_loss = cpu_step(reference, cpu, x, target)
        torch.testing.assert_close(loss, cpu_loss, rtol=RTOL, atol=ATOL, msg=f"step {step}")
    groups = poptorch_model._executable.summary["training"]["param_groups"]
    assert groups[1] == {"weights": ["fc1.bias", "fc2.bias", "ln.bias", "ln.weight"],
                         "variables": {"lr": 1e-2, "weight_decay": 0.0}}
    poptorch_model.copyWeightsToHost()
    assert_same_weights(model, reference)
    # The grouping mattered: one weight decay for all would give another LayerNorm weight.
    _, uniform = twins(28)
    cpu = torch.optim.AdamW(uniform.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(8):
        cpu_step(uniform, cpu, x, target)
    assert not torch.allclose(uniform.ln.weight, reference.ln.weight, rtol=RTOL, atol=ATOL)
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_sgd_with_two_learning_rates_and_set_optimizer_on_one_group(server):
    model, reference = twins(29)
    x, target = torch.randn(4, 8), torch.randn(4, 4)

    def groups(m):
        head = list(m.fc2.parameters())
        return [{"params": [p for p in m.parameters() if all(p is not h for h in head)]},
                {"params": head, "lr": 0.2}]

    optimizer = torch.optim.SGD(groups(model), lr=0.05, momentum=0.9)
    poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    cpu = torch.optim.SGD(groups(reference), lr=0.05, momentum=0.9)
    losses = []
    for step in range(6):
        if step == 3:  # between calls: the head's lr only, as PopTorch's setOptimizer takes it
            optimizer.param_groups[1]["lr"] = 0.01
            poptorch_model.setOptimizer(optimizer)
            cpu.param_groups[1]["lr"] = 0.01
        if step == 4:  # the state (momentum, the group's lr) survives a detach
            poptorch_model.detachFromDevice()
            poptorch_model.attachToDevice()
        _, loss = poptorch_model(x, target)
        losses.append((loss, cpu_step(reference, cpu, x, target)))
    for step, (loss, cpu_loss) in enumerate(losses):
        torch.testing.assert_close(loss, cpu_loss, rtol=RTOL, atol=ATOL, msg=f"step {step}")
    poptorch_model.copyWeightsToHost()
    assert_same_weights(model, reference)
    info = poptorch_model._session.get_loaded().training.optimizer
    assert info.variables["group/1/lr"] == pytest.approx(0.01)
    assert info.variables["group/0/lr"] == pytest.approx(0.05)
    optimizer.param_groups[0]["dampening"] = 0.5  # left at torch's default: a constant
    with pytest.raises(ValueError, match="'dampening' is a constant"):
        poptorch_model.setOptimizer(optimizer)
    poptorch_model.destroy()


def test_poptorch_attributes_taken_once_per_optimizer_must_agree():
    torch.manual_seed(30)
    model = NormedRegressor()
    optimizer = poptorch.optim.AdamW(optimum_groups(model, 0.1), lr=1e-3, loss_scaling=4.0)
    optimizer.param_groups[1]["loss_scaling"] = 8.0
    with pytest.raises(ValueError, match="param groups differ in 'loss_scaling'"):
        poptorch.trainingModel(model, optimizer=optimizer)
    amsgrad = optimum_groups(model, 0.1)
    amsgrad[1]["amsgrad"] = True
    with pytest.raises(ValueError, match="differ in 'amsgrad'"):
        poptorch.trainingModel(model, optimizer=torch.optim.AdamW(amsgrad))


@pytest.mark.ipupod(pod="POD4")
def test_a_parameter_in_no_group_is_left_alone_as_torch_does(server):
    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

        def forward(self, x, target):
            out = self.second(self.first(x))
            return out, ((out - target) ** 2).mean()

    torch.manual_seed(12)
    model, reference = WithLoss(), WithLoss()
    reference.load_state_dict(model.state_dict())
    # `first` is in no param group: torch's optimizer never updates it
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.second.parameters(), lr=0.1))
    cpu = torch.optim.SGD(reference.second.parameters(), lr=0.1)
    x, target = torch.randn(4, 4), torch.randn(4, 4)[:, :2]
    for _ in range(3):
        training(x, target)
        cpu.zero_grad()
        reference(x, target)[1].backward()
        cpu.step()
    training.copyWeightsToHost()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-5, atol=1e-6,
                                   msg=name)
    training.destroy()
