"""PopTorch's custom ops (seed 003, section 4.9) through ``ipupod.poptorch`` against a private
ipupodd that runs the tests' custom op library (tests/device/customop/test_ops.c, built by CMake as
libipupod_test_custom_ops.so: Cube, LeakyRelu, ManyAttributeOp and misbehaving ops), each
result checked against the same op written in torch.

Lines between ``# seed begin`` and ``# seed end`` are the seed's; where the seed names its own
library file (libcustom_cube_op), ``# adapted`` marks the one line that names ours."""

import ctypes
import os
import pathlib
import random
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod  # noqa: E402
import ipupod.poptorch as poptorch  # noqa: E402


def _build_dir() -> pathlib.Path:
    build = os.environ.get("IPUPOD_BUILD_DIR")
    return pathlib.Path(build) if build else pathlib.Path(ipupod.__file__).resolve().parents[2]


LIBRARIES = list((_build_dir() / "tests").rglob("libipupod_test_custom_ops.so"))
LIBRARY = str(LIBRARIES[0]) if LIBRARIES else ""
LIBRARY_DIR = os.path.dirname(LIBRARY) if LIBRARY else "/nonexistent"
ALLOWED = {"custom_ops": {"library_dirs": [LIBRARY_DIR], "call_timeout_seconds": 10}}


@pytest.fixture
def server(ipupod_server, monkeypatch):
    if not LIBRARY:
        pytest.fail(f"the tests' custom op library is not built under {_build_dir()}: "
                    f"cmake --build build --target ipupod_test_custom_ops")
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "poptorch-user")
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)
    return ipupod_server


def cube_reference(x, bias):
    """com.acme::Cube in torch: (x^3 + bias, x^3), multiplied as the library does."""
    cube = x * x * x
    return cube + bias, cube


def caught(fn):
    with pytest.raises(poptorch.Error) as info:
        fn()
    return info.value


# seed begin (Listing 4.23)
myso = list(pathlib.Path(_build_dir() / "tests").rglob("libipupod_test_custom_ops.*"))  # adapted
assert myso, "Failed to find libcustom_cube_op"
myop = ctypes.cdll.LoadLibrary(myso[0])
# seed end


# seed begin (Listing 4.24)
def test_inference():
    class BasicNetwork(nn.Module):
        def forward(self, x, bias):
            x, y = poptorch.custom_op([x, bias],
                                      "Cube",
                                      "com.acme",
                                      1,
                                      example_outputs=[x, x])
            return x, y
# seed end
    return BasicNetwork


nn = torch.nn
BasicNetwork = test_inference()
del test_inference  # the listing's function is a class factory here, not a test


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_4_9_2_the_cube_op_runs_in_an_inference_model(server):
    model = BasicNetwork()
    x = torch.full((1, 8), 2.0)
    bias = torch.full((1, 8), 4.0)
    inference_model = poptorch.inferenceModel(model)
    out = inference_model(x, bias)
    torch.testing.assert_close(out[0], torch.full((1, 8), 12.0), rtol=0, atol=0)
    torch.testing.assert_close(out[1], torch.full((1, 8), 8.0), rtol=0, atol=0)
    x, bias = torch.randn(1, 8), torch.randn(1, 8)
    for got, want in zip(inference_model(x, bias), cube_reference(x, bias)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    inference_model.destroy()


def test_4_9_2_on_the_cpu_the_op_gives_zeros_like_its_examples():
    x, y = BasicNetwork()(torch.full((1, 8), 2.0), torch.full((1, 8), 4.0))
    assert torch.equal(x, torch.zeros(1, 8)) and torch.equal(y, torch.zeros(1, 8))


# seed begin (Listing 4.25)
class Model(torch.nn.Module):
    def forward(self, x):
        x = poptorch.custom_op([x],
                               "LeakyRelu",
                               "com.acme",
                               1,
                               example_outputs=[x],
                               attributes={"alpha": 0.02})
        return x[0]
# seed end


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_4_9_3_leaky_relu_reads_its_alpha_attribute(server):
    x = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0])
    inference_model = poptorch.inferenceModel(Model())
    out = inference_model(x)
    torch.testing.assert_close(out, torch.tensor([-0.02, -0.01, 0.0, 0.5, 1.0]))
    torch.testing.assert_close(out, torch.nn.functional.leaky_relu(x, 0.02), rtol=0, atol=0)
    inference_model.destroy()


# seed begin (Listing 4.26)
def test_many_attributes_examples():
    class Model(torch.nn.Module):
        def forward(self, x):
            attributes = {
                "float_one": 1.0,
                "float_minus_two": -2.0,
                "int_zero": 0,
                "int_minus_five": -5,
                "floats_one_two_three": [1.0, 2.0, 3.0],
                "floats_minus_one_two_three": [-1.0, -2.0, -3.0],
                "ints_one_two_three": [1, 2, 3],
                "ints_minus_one_two_three": [-1, -2, -3],
                "a_string": "string with quotes and slash \" ' \\ end",
                "strs": ["abc", "def", "ghi"]
            }

            x = poptorch.custom_op([x],
                                   "ManyAttributeOp",
                                   "test.poptorch",
                                   1,
                                   example_outputs=[x],
                                   attributes=attributes)
# seed end
            return x
    return Model


ManyAttributeModel = test_many_attributes_examples()
del test_many_attributes_examples
LISTING_4_26 = {
    "float_one": 1.0, "float_minus_two": -2.0, "int_zero": 0, "int_minus_five": -5,
    "floats_one_two_three": [1.0, 2.0, 3.0], "floats_minus_one_two_three": [-1.0, -2.0, -3.0],
    "ints_one_two_three": [1, 2, 3], "ints_minus_one_two_three": [-1, -2, -3],
    "a_string": "string with quotes and slash \" ' \\ end", "strs": ["abc", "def", "ghi"]}


def many_attributes_reference(x, attributes):
    """ManyAttributeOp in Python: x + 1 when every attribute has Listing 4.26's value (its
    strs may also be PopTorch's test's "\\x01".."\\x03"), else x."""
    right = dict(LISTING_4_26)
    ok = all(attributes.get(k) == v for k, v in right.items() if k != "strs")
    ok = ok and attributes.get("strs") in (["abc", "def", "ghi"], ["\x01", "\x02", "\x03"])
    return x + (1.0 if ok else 0.0)


class ManyAttributes(torch.nn.Module):
    def __init__(self, attributes):
        super().__init__()
        self.attributes = attributes

    def forward(self, x):
        return poptorch.custom_op([x], "ManyAttributeOp", "test.poptorch", 1,
                                  example_outputs=[x], attributes=self.attributes)


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_4_9_3_every_attribute_type_of_table_4_1_reaches_the_op(server):
    x = torch.tensor([0.0])
    inference_model = poptorch.inferenceModel(ManyAttributeModel())
    out = inference_model(x)
    torch.testing.assert_close(out[0], many_attributes_reference(x, LISTING_4_26))
    torch.testing.assert_close(out[0], torch.tensor([1.0]))
    inference_model.destroy()
    for seed in range(3):  # PopTorch's own test: any order, and one wrong value
        keys = list(LISTING_4_26)
        random.Random(seed).shuffle(keys)
        attributes = {k: LISTING_4_26[k] for k in keys}
        attributes["strs"] = ["\x01", "\x02", "\x03"]
        if seed == 2:
            attributes["a_string"] = "Very wrong"
        shuffled = poptorch.inferenceModel(ManyAttributes(attributes))
        torch.testing.assert_close(shuffled(x)[0], many_attributes_reference(x, attributes))
        shuffled.destroy()


def test_attributes_are_checked_as_poptorch_checks_them():
    x = torch.tensor([0.0])
    with pytest.raises(ValueError, match="a\u1f00b contains non-ASCII characters."):
        ManyAttributes({"a_string": "a\u1f00b"})(x)
    with pytest.raises(ValueError, match="must all be the same"):
        ManyAttributes({"floats": [1.0, 2]})(x)
    with pytest.raises(ValueError, match="Attribute values must be floats"):
        ManyAttributes({"nested": {"a": 1}})(x)
    with pytest.raises(ValueError, match="All attribute keys must be strings"):
        ManyAttributes({1: 1})(x)
    with pytest.raises(ValueError, match="domain of its own"):
        poptorch.custom_op([x], "Relu", "", 1, example_outputs=[x])
    with pytest.raises(TypeError, match="example_outputs"):
        poptorch.custom_op([x], "Cube", "com.acme", 1, example_outputs=[])


class TrainingNetwork(nn.Module):
    """PopTorch's test_training_both_sides with an MSE loss: ln1 -> Cube -> ln2, the gradient
    flowing back through the Cube op's gradient function to ln1."""

    def __init__(self, on_ipu=True):
        super().__init__()
        self.ln1 = torch.nn.Linear(8, 8)
        self.ln2 = torch.nn.Linear(8, 4)
        self.on_ipu = on_ipu

    def forward(self, x, bias, target):
        h = self.ln1(x)
        if self.on_ipu:
            h, y = poptorch.custom_op([h, bias], "Cube", "com.acme", 1, example_outputs=[h, h])
        else:
            h, y = cube_reference(h, bias)
        out = self.ln2(h)
        loss = torch.nn.functional.mse_loss(out, target) + torch.sum(y) * 0.0001
        return out, loss


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_training_goes_back_through_the_cube_ops_gradient(server):
    torch.manual_seed(0)
    model, reference = TrainingNetwork(), TrainingNetwork(on_ipu=False)
    reference.load_state_dict(model.state_dict())
    poptorch_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05))
    cpu = torch.optim.SGD(reference.parameters(), lr=0.05)
    weights_before = model.ln1.weight.detach().clone()
    for step in range(5):
        x, target = torch.rand(2, 8) * 0.5, torch.rand(2, 4)
        bias = torch.full((2, 8), 0.1)
        _, loss = poptorch_model(x, bias, target)
        cpu.zero_grad()
        _, cpu_loss = reference(x, bias, target)
        cpu_loss.backward()
        cpu.step()
        torch.testing.assert_close(loss, cpu_loss.detach(), rtol=1e-4, atol=1e-5)
    poptorch_model.copyWeightsToHost()
    assert not torch.allclose(weights_before, model.ln1.weight)  # the gradient reached ln1
    torch.testing.assert_close(model.ln1.weight, reference.ln1.weight, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.ln2.weight, reference.ln2.weight, rtol=1e-4, atol=1e-5)
    poptorch_model.destroy()


class NoGradNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.Linear(4, 4)

    def forward(self, x, target):
        h = poptorch.custom_op([self.ln(x)], "NoGrad", "com.acme", 1,
                               example_outputs=[x])[0]
        return h, torch.nn.functional.mse_loss(h, target)


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_training_through_an_op_without_a_gradient_fails_the_compile(server):
    model = NoGradNetwork()
    poptorch_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    error = caught(lambda: poptorch_model(torch.rand(2, 4), torch.rand(2, 4)))
    assert error.code.name == "INVALID_ARGUMENT"
    assert "custom op com.acme::NoGrad" in error.message
    assert "has no gradient function" in error.message


class Misbehaving(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x):
        return poptorch.custom_op([x], self.op, "test.bad", 1, example_outputs=[x])[0]


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_a_crashing_op_fails_its_run_and_the_server_serves_on(server):
    crashing = poptorch.inferenceModel(Misbehaving("Segfault"))
    error = caught(lambda: crashing(torch.ones(2, 3)))
    assert error.code.name == "INTERNAL"
    assert "custom op test.bad::Segfault" in error.message
    assert "in its compute function" in error.message
    crashing.destroy()
    cube = poptorch.inferenceModel(BasicNetwork())
    x, bias = torch.randn(1, 8), torch.randn(1, 8)
    torch.testing.assert_close(cube(x, bias)[0], cube_reference(x, bias)[0], rtol=0, atol=0)
    cube.destroy()
    assert server.process.poll() is None


@pytest.mark.ipupod(pod="POD4")
def test_a_server_that_allows_no_library_refuses_the_model_naming_the_key(server):
    inference_model = poptorch.inferenceModel(BasicNetwork())
    error = caught(lambda: inference_model(torch.ones(1, 8), torch.ones(1, 8)))
    assert error.code.name == "PERMISSION_DENIED"
    assert f"custom op library '{LIBRARY}'" in error.message
    assert "custom_ops.library_dirs" in error.message


class NamedLibrary(nn.Module):
    def forward(self, x, bias):
        return poptorch.custom_op([x, bias], "Cube", "com.acme", 1, example_outputs=[x, x],
                                  library=LIBRARY)


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_library_names_the_servers_copy_and_an_unknown_op_is_not_found(server):
    model = poptorch.inferenceModel(NamedLibrary())
    x, bias = torch.randn(1, 8), torch.randn(1, 8)
    torch.testing.assert_close(model(x, bias)[1], cube_reference(x, bias)[1], rtol=0, atol=0)
    model.destroy()

    class Unknown(nn.Module):
        def forward(self, x):
            return poptorch.custom_op([x], "Square", "com.nobody", 1, example_outputs=[x])[0]
    error = caught(lambda: poptorch.inferenceModel(Unknown())(torch.ones(2)))
    assert error.code.name == "NOT_FOUND"
    assert "ctypes.cdll.LoadLibrary" in error.message and "library=PATH" in error.message
    with pytest.raises(ValueError, match="absolute path on the server"):
        poptorch.custom_op([x], "Cube", "com.acme", 1, example_outputs=[x, x],
                           library="libacme.so")


def helpers_of(pid):
    """The ipupod-custom-op-host processes ipupodd ``pid`` started."""
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as file:
            children += [int(c) for c in file.read().split()]
    helpers = []
    for child in children:
        try:
            with open(f"/proc/{child}/comm") as file:
                if file.read().startswith("ipupod-custom"):
                    helpers.append(child)
        except FileNotFoundError:
            pass
    return helpers


def ended(pid):
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has ended
    except FileNotFoundError:
        return True


def wait_until(condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.ipupod(pod="POD4", config=ALLOWED)
def test_a_programs_helper_ends_with_the_program_and_every_helper_with_ipupodd(server):
    x, bias = torch.randn(1, 8), torch.randn(1, 8)
    model = poptorch.inferenceModel(BasicNetwork())
    model(x, bias)
    [helper] = helpers_of(server.process.pid)  # one for the loaded program
    model.destroy()  # the session ends, its program is unloaded
    wait_until(lambda: ended(helper))
    model = poptorch.inferenceModel(BasicNetwork())
    model(x, bias)
    [helper] = helpers_of(server.process.pid)
    server.kill()  # SIGKILL: ipupodd cannot stop its helpers itself
    wait_until(lambda: ended(helper))
