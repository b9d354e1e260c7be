"""Shared fixtures of the package's own tests: models compiled once per test process.

Each model is exported by torch (Debian's python3-torch; the tests that need one skip without
it) with its weights kept under their ONNX initializer names, and compiled with the real
``ipupod compile`` of the build tree (``$IPUPOD_CLI_BINARY``, else found as
``ipupod.testing.find_binary`` finds ipupodd). Run from the build tree:

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -p ipupod.testing python/tests
"""

import dataclasses
import os
import subprocess
from typing import Dict, List

import numpy as np
import pytest

from ipupod.testing import find_binary


@dataclasses.dataclass
class Model:
    """A compiled model: its .ipx, the torch module it came from and its initial weights."""

    ipx: str
    onnx: str
    module: object
    weights: Dict[str, np.ndarray]


def cli_binary() -> str:
    return find_binary("ipupod", "IPUPOD_CLI_BINARY")


def run_cli(server: str, user: str, *args: str,
            timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``ipupod --server SERVER --user USER ARGS`` to completion."""
    return subprocess.run([cli_binary(), "--server", server, "--user", user, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def compile_model(onnx: str, ipx: str, args: List[str]) -> None:
    done = subprocess.run([cli_binary(), "compile", onnx, "-o", ipx, *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def server(ipupod_server, monkeypatch):
    """The private ipupodd as ``ipupod.poptorch`` finds it: ``$IPUPOD_SERVER``, user
    ``poptorch-user``, no token, no waiting in the queue and no client-side executable
    cache, whatever the environment the tests run in holds."""
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "poptorch-user")
    for variable in ("IPUPOD_TOKEN", "POPTORCH_WAIT_FOR_IPU", "POPTORCH_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    return ipupod_server


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def _export(torch, module, example, path, inputs, outputs) -> Dict[str, np.ndarray]:
    torch.onnx.export(module, example, path, input_names=inputs, output_names=outputs,
                      opset_version=14, do_constant_folding=False)
    return {name: value.detach().numpy().copy() for name, value in module.state_dict().items()}


@pytest.fixture(scope="session")
def mlp(torch, model_dir) -> Model:
    """16 -> 32 -> ReLU -> 4, micro-batch 2 x 2 device iterations: 4 samples per step."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                 torch.nn.Linear(32, 4)).eval()
    onnx = os.path.join(model_dir, "mlp.onnx")
    weights = _export(torch, module, (torch.randn(2, 16),), onnx, ["x"], ["y"])
    ipx = os.path.join(model_dir, "mlp.ipx")
    compile_model(onnx, ipx, ["--set", "inference_device_iterations=2"])
    return Model(ipx, onnx, module, weights)


@pytest.fixture(scope="session")
def linear_mse(torch, model_dir) -> Model:
    """PopTorch's seed example: Linear(10, 10) returning (out, MSE loss), trained with SGD;
    micro-batch 4 x 2 device iterations (two weight updates per run)."""
    torch.manual_seed(1)

    class LinearMse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(10, 10)

        def forward(self, x, target):
            y = self.fc(x)
            return y, ((y - target) ** 2).mean()  # torch 1.13 cannot export F.mse_loss

    module = LinearMse()
    onnx = os.path.join(model_dir, "linear_mse.onnx")
    weights = _export(torch, module, (torch.randn(4, 10), torch.randn(4, 10)), onnx,
                      ["x", "target"], ["out", "loss"])
    ipx = os.path.join(model_dir, "linear_mse.ipx")
    compile_model(onnx, ipx, ["--train", "--set", "device_iterations=2"])
    return Model(ipx, onnx, module, weights)


def torch_sgd(torch, model: Model, x: np.ndarray, target: np.ndarray, updates: int,
              batch: int, lr: float):
    """The reference: ``updates`` SGD steps of ``batch`` samples each, in data order, wrapping
    around; returns (losses, weights by ONNX name)."""
    module = type(model.module)()
    module.load_state_dict({k: torch.from_numpy(v) for k, v in model.weights.items()})
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    steps = x.shape[0] // batch
    losses = []
    for update in range(updates):
        rows = slice((update % steps) * batch, (update % steps + 1) * batch)
        optimizer.zero_grad()
        _, loss = module(torch.from_numpy(x[rows]), torch.from_numpy(target[rows]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in module.state_dict().items()}
