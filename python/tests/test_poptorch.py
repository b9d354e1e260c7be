"""Acceptance: PopTorch's own examples (seed 003, sections 4.2-4.5, 4.8 and 4.10) with
``import ipupod.poptorch as poptorch`` in place of ``import poptorch``, against a private
ipupodd found through ``$IPUPOD_SERVER``, each checked against torch on the CPU.

Lines between ``# seed begin`` and ``# seed end`` are the seed's, unchanged; what the seed
leaves undefined (``Model``, ``train``, ``validate``, ``reboot_server``, ...) is defined
before, and the checks come after."""

import copy
import os
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod  # noqa: E402
import ipupod.poptorch as poptorch  # noqa: E402


class ExampleModelWithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)
        self.loss = torch.nn.MSELoss()

    def forward(self, x, target=None):
        fc = self.fc(x)
        if self.training:
            return fc, self.loss(fc, target)
        return fc


def sgd_reference(model, steps, x, target, **sgd):
    """torch on the CPU: a copy of ``model`` after ``steps`` optimizer steps."""
    reference = ExampleModelWithLoss()
    reference.load_state_dict(model.state_dict())
    reference.train()
    optimizer = torch.optim.SGD(reference.parameters(), **sgd)
    for _ in range(steps):
        optimizer.zero_grad()
        reference(x, target)[1].backward()
        optimizer.step()
    return reference


@pytest.mark.ipupod(pod="POD4")
def test_4_2_1_training_model_matches_the_host_after_800_steps(server):
    # seed begin (4.2.1; `import poptorch` replaced; 800 steps take about 3 s here)
    torch.manual_seed(0)
    model = ExampleModelWithLoss()

    # Wrap the model in our PopTorch annotation wrapper.
    poptorch_model = poptorch.trainingModel(model)

    # Some dummy inputs.
    input = torch.randn(10)
    target = torch.randn(10)
    ones = torch.ones(10)  # noqa: F841 - the seed's

    # Train on IPU.
    for i in range(0, 800):
        # Each call here executes the forward pass, loss calculation, and backward
        # pass in one step.
        # Model input and loss function input are provided together.
        poptorch_out, loss = poptorch_model(input, target)
        print(f"{i}: {loss}")

    # Copy the trained weights from the IPU back into the host model.
    poptorch_model.copyWeightsToHost()

    # Execute the trained weights on host.
    model.eval()
    native_out = model(input)

    # Models should be very close to native output although some operations are
    # numerically different and floating point differences can accumulate.
    torch.testing.assert_close(native_out, poptorch_out, rtol=1e-04, atol=1e-04)
    # seed end
    assert loss.shape == () and loss.item() < 1e-6
    torch.manual_seed(0)
    untrained = ExampleModelWithLoss()
    reference = sgd_reference(untrained, 800, input, target, lr=0.01)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(untrained.fc.weight, model.fc.weight)


@pytest.mark.ipupod(pod="POD4")
def test_4_2_3_inference_and_training_models_share_one_module(server, tmp_path):
    torch.manual_seed(1)
    x, target = torch.randn(4, 10), torch.randn(4, 10)
    Model = ExampleModelWithLoss  # noqa: N806 - the seed's name
    validated = []

    def train(training_model):
        for _ in range(5):
            training_model(x, target)

    def train_on_cpu(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            module(x, target)[1].backward()
            optimizer.step()

    def validate(inference_model):
        validated.append(inference_model(x))

    def cpu_view():
        with torch.no_grad():
            return torch.nn.functional.linear(x, model.fc.weight, model.fc.bias)

    os.chdir(tmp_path)
    # seed begin (4.2.3)
    model = Model()
    model.eval()

    poptorch_inf = poptorch.inferenceModel(model)

    # Switch for "poptorch.trainingModel": poptorch_inf will remain in "eval" mode
    model.train()
    poptorch_train = poptorch.trainingModel(model)

    # train on IPU
    train(poptorch_train)
    torch.save(model.state_dict(), "model.save")  # OK

    # Aready in "eval" mode
    validate(poptorch_inf)  # OK

    # switch to "eval" mode for CPU
    model.eval()
    validate(model)  # OK

    # train on CPU
    model.train()
    train_on_cpu(model)

    # Explicit copy needed
    poptorch_inf.copyWeightsToDevice()
    validate(poptorch_inf)
    # seed end
    saved = torch.load("model.save")
    ipu_trained, cpu_of_it, after_cpu_training = validated
    torch.testing.assert_close(ipu_trained, cpu_of_it, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ipu_trained, torch.nn.functional.linear(
        x, saved["fc.weight"], saved["fc.bias"]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(after_cpu_training, cpu_view(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after_cpu_training, ipu_trained, atol=1e-4)


class Network(torch.nn.Module):
    """The seed's Block example (4.4.1)."""

    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = torch.nn.Linear(5, 5)

        self.act = torch.nn.ReLU()
        self.softmax = torch.nn.Softmax(dim=1)

    def forward(self, x):

        # Explicit layers on a certain IPU
        poptorch.Block.useAutoId()
        with poptorch.Block(ipu_id=0):
            x = self.act(self.layer1(x))

        with poptorch.Block(ipu_id=1):
            x = self.act(self.layer2(x))

        with poptorch.Block(ipu_id=2):
            x = self.act(self.layer3(x))
            x = self.act(self.layer4(x))

        with poptorch.Block(ipu_id=3):
            x = self.softmax(x)
        return x


def session_of(executor):
    return executor._session.refresh()


@pytest.mark.ipupod(pod="POD4")
def test_4_4_1_blocks_place_the_model_over_four_ipus(server):
    torch.manual_seed(2)
    # seed begin (4.4.1, Block)
    model = Network()
    opts = poptorch.Options()
    opts.deviceIterations(4)
    poptorch_model = poptorch.inferenceModel(model, options=opts)
    print(poptorch_model(torch.rand((4, 5))))
    # seed end
    x = torch.rand((4, 5))
    torch.testing.assert_close(poptorch_model(x), model(x), rtol=1e-5, atol=1e-6)
    assert len(session_of(poptorch_model).ipus) == 4
    assert poptorch_model._executable.summary["stages"] == 4


class FunctionNetwork(torch.nn.Module):
    """The seed's BlockFunction example (4.4.1)."""

    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = torch.nn.Linear(5, 5)

        self.act = torch.nn.ReLU()
        self.softmax = torch.nn.Softmax(dim=1)

    def forward(self, x):
        poptorch.Block.useAutoId()
        x = self.block_one(x)
        x = self.block_two(x)
        x = self.final_activation(x)
        return x

    @poptorch.BlockFunction(ipu_id=0)
    def block_one(self, x):
        x = self.act(self.layer1(x))
        x = self.act(self.layer2(x))
        return x

    @poptorch.BlockFunction(ipu_id=1)
    def block_two(self, x):
        x = self.act(self.layer3(x))
        x = self.act(self.layer4(x))
        return x

    @poptorch.BlockFunction(ipu_id=1)
    def final_activation(self, x):
        return self.softmax(x)


@pytest.mark.ipupod(pod="POD4")
def test_4_4_1_block_functions_place_the_model_over_two_ipus(server):
    torch.manual_seed(2)
    # seed begin (4.4.1, BlockFunction)
    model = FunctionNetwork()
    opts = poptorch.Options()
    opts.deviceIterations(4)
    poptorch_model = poptorch.inferenceModel(model, options=opts)
    print(poptorch_model(torch.rand((4, 5))))
    # seed end
    x = torch.rand((4, 5))
    torch.testing.assert_close(poptorch_model(x), model(x), rtol=1e-5, atol=1e-6)
    assert len(session_of(poptorch_model).ipus) == 2
    assert poptorch_model._executable.summary["stages"] == 2


@pytest.mark.ipupod(pod="POD4")
def test_4_4_1_begin_block_over_four_ipus(server):
    # The seed's BeginBlock example loads BERT from Hugging Face (transformers and a
    # download); the same annotations on a model of four layers instead.
    torch.manual_seed(3)
    model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(4)))
    model[1] = poptorch.BeginBlock(model[1], ipu_id=1)
    model[2] = poptorch.BeginBlock(model[2], ipu_id=2)
    model[3] = poptorch.BeginBlock(model[3], ipu_id=3)
    data_batch_size = 4
    opts = poptorch.Options()
    opts.deviceIterations(data_batch_size)
    poptorch_model = poptorch.inferenceModel(model, opts)
    x = torch.randn(8, 8)
    torch.testing.assert_close(poptorch_model(x[:4]), model(x[:4]), rtol=1e-5, atol=1e-6)
    assert len(session_of(poptorch_model).ipus) == 4
    placement = poptorch_model._executable.summary
    assert placement["stages"] == 4 and placement["ipus"]["per_replica"] == 4


@pytest.mark.ipupod(pod="POD4")
def test_4_5_optimizer_attributes_and_set_optimizer(server):
    torch.manual_seed(4)
    model = ExampleModelWithLoss()
    before = ExampleModelWithLoss()
    before.load_state_dict(model.state_dict())
    options = poptorch.Options()
    input, target = torch.randn(2, 10), torch.randn(2, 10)
    # seed begin (4.5)
    opt = poptorch.optim.SGD(model.parameters(),
                             lr=0.01,
                             loss_scaling=2.0,
                             use_combined_accum=False)
    poptorch_model = poptorch.trainingModel(model, options, opt)
    poptorch_model(input, target)
    # Update optimizer attribute
    opt.loss_scaling = 1.0
    # Update param_group attribute
    opt.param_groups[0]["loss_scaling"] = 1.0
    # Set the new optimizer in the model
    poptorch_model.setOptimizer(opt)
    poptorch_model(input, target)
    # seed end
    opt.param_groups[0]["lr"] = 0.5
    poptorch_model.setOptimizer(opt)
    poptorch_model(input, target)
    poptorch_model.copyWeightsToHost()
    reference = sgd_reference(before, 2, input, target, lr=0.01)
    reference = sgd_reference(reference, 1, input, target, lr=0.5)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-5, atol=1e-6)
    opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError, match="'momentum' is a constant"):
        poptorch_model.setOptimizer(opt)


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
    lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99)),
    lambda p: torch.optim.AdamW(p, lr=0.01),
    lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
    lambda p: poptorch.optim.Adam(p, lr=0.01),
    lambda p: poptorch.optim.LAMB(p, lr=0.01),
], ids=["sgd", "adam", "adamw", "rmsprop", "poptorch-adam", "poptorch-lamb"])
def test_4_5_optimizers_train_as_torch_does(server, make):
    torch.manual_seed(5)
    model = ExampleModelWithLoss()
    reference = ExampleModelWithLoss()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(4, 10), torch.randn(4, 10)
    poptorch_model = poptorch.trainingModel(model, optimizer=make(model.parameters()))
    cpu_optimizer = make(reference.parameters())
    for _ in range(5):
        _, loss = poptorch_model(x, target)
        cpu_optimizer.zero_grad()
        _, cpu_loss = reference(x, target)
        cpu_loss.backward()
        cpu_optimizer.step()
    poptorch_model.copyWeightsToHost()
    torch.testing.assert_close(loss, cpu_loss.detach(), rtol=1e-4, atol=1e-5)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-4, atol=1e-5)


class PytorchModel(torch.nn.Module):
    def __init__(self, model_param):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([model_param]))

    def forward(self, x, y):
        return (x + y) * self.scale


@pytest.mark.ipupod(pod="POD4", config={"reset_ms": {"ipu": 10, "partition": 10, "pod": 10}})
def test_4_3_a_recoverable_fault_raises_with_its_recovery_action(server):
    admin = server.client(user="admin")
    seen = []
    model_param = 1.0

    def reboot_server():
        seen.append("reboot")

    def shutdown_system():
        seen.append("shutdown")

    # Every IPU of the pod faults, so the model's fresh session meets one.
    first = poptorch.inferenceModel(PytorchModel(1.0))
    assert first(torch.tensor([1.]), torch.tensor([2.])) == 3.0
    for ipu in range(4):
        admin.inject_fault(ipu, "ipu-reset")
    inference_model = first
    # seed begin (4.3.3; the model is wrapped before, to be on the faulted IPUs)
    try:
        m = PytorchModel(model_param)  # noqa: F841 - the seed's
        t1 = torch.tensor([1.])
        t2 = torch.tensor([2.])
        assert inference_model(t1, t2) == 3.0
    except poptorch.RecoverableError as e:
        print(e)
        seen.append(e.recovery_action)
        if e.recovery_action == "FULL_RESET":
            reboot_server()
        elif e.recovery_action == "IPU_RESET":
            print("Need to reset the IPU")
        elif e.recovery_action == "PARITION_RESET":
            print("Need to reset the partition")
    except poptorch.UnrecoverableError as e:
        print(f"Unrecoverable error: machine needs to be taken offline: {e}")
        shutdown_system()
    except poptorch.Error as e:
        print(f"Received {e.message} from component {e.type}, "
              f"location: {e.location}")
        # Or you could just print all the information at once:
        print(e)
    except Exception as e:
        print(e)
    # seed end
    assert seen == ["IPU_RESET"]
    # Recovery: the IPUs are reset when released; attach again and go on.
    inference_model.detachFromDevice()
    admin.reset_pod()
    inference_model.attachToDevice()
    assert inference_model(t1, t2) == 3.0


@pytest.mark.ipupod(pod="POD4")
def test_4_2_2_inference_model_runs_mobilenet_v2(server):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(10)
    # seed begin (4.2.2)
    # Some dummy imagenet sized input.
    picture_of_a_cat_here = torch.randn([1, 3, 224, 224])

    # The model, in this case a MobileNet model with pretrained weights that comes
    # canned with Pytorch.
    model = torchvision.models.mobilenet_v2()  # not pretrained=True: that downloads weights
    model.train(False)

    # Wrap in the PopTorch inference wrapper
    inference_model = poptorch.inferenceModel(model)

    # Execute on IPU.
    out_tensor = inference_model(picture_of_a_cat_here)

    # Get the top 5 ImageNet classes.
    top_five_classes = torch.topk(torch.softmax(out_tensor, 1), 5)
    print(top_five_classes)

    # Try the same on native PyTorch
    native_out = model(picture_of_a_cat_here)

    native_top_five_classes = torch.topk(torch.softmax(native_out, 1), 5)

    # Models should be very close to native output although some operations are
    # numerically different and floating point differences can accumulate.
    assert any(top_five_classes[1][0] == native_top_five_classes[1][0])
    # seed end
    torch.testing.assert_close(out_tensor, native_out.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.ipupod(pod="POD4")
def test_4_7_inference_half_returns_half(server):
    # seed begin (4.2.2, inference_half)
    model = torch.nn.Linear(1, 10)

    # Cast the parameters (weights) to half.
    model.half()

    t1 = torch.tensor([1.]).half()

    opts = poptorch.Options()

    inference_model = poptorch.inferenceModel(model, opts)
    out = inference_model(t1)

    assert out.dtype == torch.half
    # seed end
    # y = w * 1 + b, rounded once to float16: exactly torch's float32 result, rounded.
    with torch.no_grad():
        want = (model.weight.float() @ t1.float() + model.bias.float()).half()
    assert torch.equal(out, want)
    inference_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_5_1_loss_scaling_trains_a_half_model_whose_gradients_underflow(server):
    class Weighted(torch.nn.Module):  # a loss weighted 1e-4: d(loss)/d(out) ~ 4e-9
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(32, 8)
            with torch.no_grad():
                self.fc.weight.uniform_(-1e-3, 1e-3)
                self.fc.bias.zero_()

        def forward(self, x, target):
            out = self.fc(x)
            return out, ((out - target) ** 2).mean() * 1e-4

    torch.manual_seed(5)
    start = Weighted()
    x = torch.randn(20, 64, 32).half()
    t = (torch.randn(20, 64, 8) * 0.01).half()
    reference = copy.deepcopy(start).half().float()  # float32 torch from the same values
    opt = torch.optim.SGD(reference.parameters(), lr=1000)
    for i in range(20):
        opt.zero_grad()
        reference(x[i].float(), t[i].float())[1].backward()
        opt.step()
    travel = (reference.fc.weight - start.fc.weight.half().float()).norm()
    errors = []
    for scaling in (1.0, 32768.0):
        model = copy.deepcopy(start).half()
        optimizer = poptorch.optim.SGD(model.parameters(), lr=1000, loss_scaling=scaling)
        training = poptorch.trainingModel(model, poptorch.Options(), optimizer)
        for i in range(20):
            out, loss = training(x[i], t[i])
        assert out.dtype == torch.half
        training.copyWeightsToHost()
        assert model.fc.weight.dtype == torch.half
        errors.append(float((model.fc.weight.float() - reference.fc.weight).norm() / travel))
        training.destroy()
    assert errors[1] < 0.05, errors  # follows float32 torch
    assert errors[0] > 0.3, errors   # the unscaled gradient underflowed


def test_float64_and_other_precisions_are_refused():
    # float16 and float32 may mix (4.7): python/tests/test_poptorch_buffers.py checks them
    with pytest.raises(ValueError, match="float32 or float16"):
        poptorch.inferenceModel(torch.nn.Linear(1, 2).double())(torch.tensor([1.]).double())
    with pytest.raises(ValueError, match="torch.half or torch.float"):
        poptorch.Options().Precision.setPartialsType(torch.int32)


def test_4_4_3_what_ipupod_does_not_model_is_refused_clearly():
    # Inputs are grouped across replicas, but not by an unknown kind of group (4.4.3);
    # weights are not grouped.
    with pytest.raises(poptorch.Error):
        poptorch.Options().inputReplicaGrouping(4, None)
    wrapped = poptorch.trainingModel(ExampleModelWithLoss())
    with pytest.raises(poptorch.Error, match="replicaGrouping is not available"):
        wrapped.fc.weight.replicaGrouping(None, 2, None)


class ExampleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)

    def forward(self, x):
        return self.fc(x)


def custom_loss(output, target):
    # seed begin (4.6.3)
    # Mean squared error with a scale
    loss = output - target
    loss = loss * loss * 5
    return poptorch.identity_loss(loss, reduction="mean")
    # seed end


class ExampleModelWithCustomLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = ExampleModel()

    def forward(self, input, target):
        out = self.model(input)
        return out, custom_loss(out, target)


@pytest.mark.ipupod(pod="POD4")
def test_4_6_3_identity_loss_trains_a_custom_loss(server):
    torch.manual_seed(9)
    model, reference = ExampleModelWithCustomLoss(), ExampleModelWithCustomLoss()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(4, 10), torch.randn(4, 10)
    poptorch_model = poptorch.trainingModel(model)
    cpu = torch.optim.SGD(reference.parameters(), lr=0.01)
    for _ in range(3):
        _, loss = poptorch_model(x, target)
        cpu.zero_grad()
        _, cpu_loss = reference(x, target)
        cpu_loss.backward()
        cpu.step()
    torch.testing.assert_close(loss, cpu_loss.detach(), rtol=1e-5, atol=1e-6)
    poptorch_model.copyWeightsToHost()
    torch.testing.assert_close(model.model.fc.weight, reference.model.fc.weight, rtol=1e-5,
                               atol=1e-6)


def test_4_3_a_server_that_is_down_is_a_poptorch_error(monkeypatch):
    monkeypatch.setenv("IPUPOD_SERVER", "127.0.0.1:1")
    model = poptorch.inferenceModel(PytorchModel(1.0))
    with pytest.raises(poptorch.Error, match="cannot reach ipupodd at 127.0.0.1:1") as caught:
        model(torch.tensor([1.]), torch.tensor([2.]))
    assert caught.value.type == "transport.unavailable"


@pytest.mark.ipupod(config={"tokens": [{"token": "s3cret-alice", "user": "alice",
                                          "role": "user"}]})
def test_a_wrong_token_says_where_the_front_end_takes_it_from(server, monkeypatch):
    opts = poptorch.Options().server(server.address, token="s3cret-bob")
    with pytest.raises(poptorch.Error, match=r"token.*poptorch.Options\(\).server") as caught:
        poptorch.inferenceModel(PytorchModel(1.0), opts)(torch.tensor([1.]), torch.tensor([2.]))
    assert caught.value.code.name == "UNAUTHENTICATED"
    monkeypatch.setenv("IPUPOD_TOKEN", "s3cret-alice")
    model = poptorch.inferenceModel(PytorchModel(1.0))
    assert model(torch.tensor([1.]), torch.tensor([2.])) == 3.0


@pytest.mark.ipupod(pod="POD4")
def test_4_11_4_no_free_ipu_fails_at_once_or_waits_in_the_queue(server, monkeypatch):
    client = server.client()
    holder = client.attach(ipus=4)
    model = poptorch.inferenceModel(PytorchModel(2.0))
    t1, t2 = torch.tensor([1.]), torch.tensor([2.])
    with pytest.raises(poptorch.Error, match="POPTORCH_WAIT_FOR_IPU=1") as caught:
        model(t1, t2)
    assert caught.value.code.name == "RESOURCE_EXHAUSTED"
    monkeypatch.setenv("POPTORCH_WAIT_FOR_IPU", "1")
    threading.Timer(0.5, holder.release).start()
    assert model(t1, t2) == 6.0


@pytest.mark.ipupod(pod="POD4")
def test_4_10_2_compile_and_export_then_load(server, tmp_path):
    filename = str(tmp_path / "model.poptorch")
    ipu_target_version = 2
    # seed begin (4.10.2)
    torch.manual_seed(0)
    model = ExampleModelWithLoss()

    opts = poptorch.Options()
    # You don't need a real IPU to compile the executable.
    opts.useOfflineIpuTarget(ipu_target_version)

    # Wrap the model in our PopTorch annotation wrapper.
    poptorch_model = poptorch.trainingModel(model, opts)

    # Some dummy inputs.
    input = torch.randn(10)
    target = torch.randn(10)

    poptorch_model.compileAndExport(filename, input, target)
    # seed end
    assert not poptorch_model.isAttachedToDevice()
    # seed begin (4.10.2)
    poptorch_model = poptorch.load(filename)

    # That's all: your model is ready to be used.
    poptorch_model(input, target)  # Run on IPU
    # seed end
    _, loss = poptorch_model(input, target)
    reference = sgd_reference(model, 1, input, target, lr=0.01)
    torch.testing.assert_close(loss, reference(input, target)[1].detach(), rtol=1e-5, atol=1e-6)
    again = poptorch.trainingModel(ExampleModelWithLoss(), opts)
    again.loadExecutable(filename)
    again(input, target)
    assert again._executable == poptorch_model._executable


@pytest.mark.ipupod(pod="POD4", config={"executable_cache_mb": 1})
def test_attach_compiles_again_when_the_server_evicted_the_executable(server):
    torch.manual_seed(9)
    first, second = torch.nn.Linear(512, 400), torch.nn.Linear(512, 400)  # 0.8 MB each
    x = torch.randn(2, 512)
    model = poptorch.inferenceModel(first)
    model(x)
    model.detachFromDevice()
    poptorch.inferenceModel(second)(x)  # its executable pushes the first out of 1 MB
    model.attachToDevice()
    torch.testing.assert_close(model(x), first(x), rtol=1e-5, atol=1e-6)
    model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_detach_and_attach_keep_the_training_state(server):
    torch.manual_seed(6)
    model = ExampleModelWithLoss()
    reference = ExampleModelWithLoss()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(2, 10), torch.randn(2, 10)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    poptorch_model(x, target)
    poptorch_model.detachFromDevice()
    assert not poptorch_model.isAttachedToDevice()
    poptorch_model.attachToDevice()
    poptorch_model(x, target)
    poptorch_model.destroy()
    cpu = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for _ in range(2):
        cpu.zero_grad()
        reference(x, target)[1].backward()
        cpu.step()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="destroyed"):
        poptorch_model(x, target)


@pytest.mark.ipupod(pod="POD4")
def test_client_compile_leaves_the_executable_in_the_servers_cache(server, tmp_path):
    model = torch.nn.Linear(4, 2)
    onnx_path = tmp_path / "linear.onnx"
    torch.onnx.export(model, (torch.randn(2, 4),), str(onnx_path), input_names=["x"],
                      output_names=["y"], opset_version=14, do_constant_folding=False)
    client = server.client()
    result = client.compile(str(onnx_path), {"inference_device_iterations": 2}, report=True,
                            output=str(tmp_path / "linear.ipx"))
    assert result.summary["samples_per_step"] == 4 and result.report
    assert (tmp_path / "linear.ipx").stat().st_size > 0
    with client.attach(ipus=1) as session:
        session.load(result)
        y = session.run({"x": torch.ones(4, 4)}).outputs["y"]
    torch.testing.assert_close(torch.from_numpy(y), model(torch.ones(4, 4)).detach())
    with pytest.raises(ipupod.Error) as caught:
        client.compile(onnx_path.read_bytes()[:50])
    assert caught.value.code.name == "INVALID_ARGUMENT"
    assert client.history().records is not None
    assert client.usage(group_by="user").total.key == "TOTAL"


@pytest.mark.ipupod(pod="POD4")
def test_a_compile_out_of_ipu_memory_raises_with_the_plan_that_did_not_fit(server, tmp_path):
    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.ReLU())  # activations only
    onnx_path = tmp_path / "huge.onnx"
    torch.onnx.export(model, (torch.zeros(1 << 16, 1 << 12),), str(onnx_path),
                      input_names=["x"], output_names=["y"], opset_version=14)
    with pytest.raises(ipupod.Error) as caught:
        server.client().compile(str(onnx_path), output=str(tmp_path / "huge.ipx"))
    assert caught.value.code.name == "INVALID_ARGUMENT"
    assert "out of memory" in caught.value.message
    assert caught.value.report["ipus"][0]["total_bytes"] > 900 * 10**6
    assert not (tmp_path / "huge.ipx").exists()


class LinearMse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)

    def forward(self, x, target):
        y = self.fc(x)
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("mode, out_rows, losses", [
    (poptorch.OutputMode.All, 32, 8), (poptorch.OutputMode.Final, 8, 2),
    (poptorch.OutputMode.Sum, 8, 2), (None, 8, 2)])
def test_a_call_is_split_by_poptorchs_batch_rule_and_returns_per_output_mode(
        server, mode, out_rows, losses):
    torch.manual_seed(7)
    model, reference = LinearMse(), LinearMse()
    reference.load_state_dict(model.state_dict())
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    if mode is not None:
        opts.outputMode(mode)
    poptorch_model = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(),
                                                                         lr=0.1))
    x, target = torch.randn(32, 10), torch.randn(32, 10)  # micro-batch 4 x 2 x 2 x 2
    out, loss = poptorch_model(x, target)
    assert out.shape == (out_rows, 10) and loss.shape == (losses,)
    poptorch_model.copyWeightsToHost()
    cpu = torch.optim.SGD(reference.parameters(), lr=0.1)
    for update in range(2):  # one update per device iteration, over 4 x 2 x 2 samples
        rows = slice(16 * update, 16 * update + 16)
        cpu.zero_grad()
        reference(x[rows], target[rows])[1].backward()
        cpu.step()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="compiled for calls of 32 samples"):
        poptorch_model(x[:16], target[:16])
    with pytest.raises(ValueError, match=r"\[20, 10\].*multiple of 8 \(micro-batch x "
                       r"deviceIterations 2 x replicationFactor 2 x gradientAccumulation 2\)"):
        poptorch.trainingModel(LinearMse(), opts)(x[:20], target[:20])


class NormedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)
        self.out.weight.requires_grad_(False)

    def forward(self, x, target):
        y = self.out(torch.relu(self.bn(self.fc(x))))
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.ipupod(pod="POD4")
def test_batchnorm_statistics_train_and_frozen_parameters_stay(server):
    torch.manual_seed(8)
    model, reference = NormedModel(), NormedModel()
    reference.load_state_dict(model.state_dict())
    poptorch_model = poptorch.trainingModel(model, poptorch.Options().deviceIterations(2),
                                            torch.optim.SGD(model.parameters(), lr=0.1))
    x, target = torch.randn(16, 6), torch.randn(16, 3)
    for _ in range(3):
        poptorch_model(x, target)
    state = model.state_dict()  # implicitly copied from the device
    cpu = torch.optim.SGD([p for p in reference.parameters() if p.requires_grad], lr=0.1)
    for _ in range(3):
        for half in (slice(0, 8), slice(8, 16)):
            cpu.zero_grad()
            reference(x[half], target[half])[1].backward()
            cpu.step()
    # not modelled: the step counter num_batches_tracked (used only with momentum=None)
    for name, value in reference.state_dict().items():
        if name != "bn.num_batches_tracked":
            torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-5)
    assert not torch.equal(state["bn.running_mean"], torch.zeros(8))
    assert poptorch_model._executable.summary["training"]["weights"] == [
        "bn.bias", "bn.weight", "fc.bias", "fc.weight", "out.bias"]


@pytest.mark.ipupod(pod="POD4")
def test_4_5_5_optimizer_state_is_read_and_written_through_state_dict(server, tmp_path):
    PATH = str(tmp_path / "optimizer.pt")  # noqa: N806 - the seed's name
    torch.manual_seed(11)
    model = ExampleModelWithLoss()
    reference = ExampleModelWithLoss()
    reference.load_state_dict(model.state_dict())
    input, target = torch.randn(2, 10), torch.randn(2, 10)
    # seed begin (4.5.5)
    optimizer = poptorch.optim.Adam(model.parameters())
    poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    poptorch_model(input, target)
    # Saving the optimizer state
    torch.save({'optimizer_state_dict': optimizer.state_dict()}, PATH)
    # Destroy original model to prevent an error when wrapping the model again
    poptorch_model.destroy()
    new_optimizer = poptorch.optim.Adam(model.parameters())
    # Loading the optimizer state back
    checkpoint = torch.load(PATH)
    new_optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
    # The new training model will use the loaded optimizer state
    new_poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    # seed end
    saved = checkpoint["optimizer_state_dict"][poptorch.optim.DEVICE_STATE_KEY]
    assert {"optimizer/fc.weight/exp_avg", "optimizer/step"} <= set(saved)
    assert set(new_optimizer.pending_device_state) == set(saved)
    new_poptorch_model(input, target)  # Adam's second step: its state came back
    new_poptorch_model.copyWeightsToHost()
    cpu = torch.optim.Adam(reference.parameters())
    for _ in range(2):
        cpu.zero_grad()
        reference(input, target)[1].backward()
        cpu.step()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-5, atol=1e-6)
    state = optimizer.state_dict()[poptorch.optim.DEVICE_STATE_KEY]  # read from the device
    assert int(state["optimizer/step"].reshape(-1)[0]) == 2


class ThreeBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(3))

    def forward(self, x):
        for ipu, layer in enumerate(self.layers):
            with poptorch.Block(ipu_id=ipu):
                x = torch.relu(layer(x))
        return x


@pytest.mark.ipupod(pod="POD4")
def test_sharded_execution_and_auto_rounding_three_ipus(server):
    torch.manual_seed(12)
    model = ThreeBlocks()
    x = torch.randn(4, 6)
    opts = poptorch.Options().deviceIterations(4)
    with pytest.raises(poptorch.Error) as caught:  # 3 IPUs: not a power of two
        poptorch.inferenceModel(model, opts)(x)
    assert caught.value.code.name == "INVALID_ARGUMENT" and "auto_round" in caught.value.message
    opts.autoRoundNumIPUs(True).setExecutionStrategy(poptorch.ShardedExecution())
    sharded = poptorch.inferenceModel(model, opts)
    torch.testing.assert_close(sharded(x), model(x), rtol=1e-5, atol=1e-6)
    summary = sharded._executable.summary
    assert summary["execution"] == "sharded" and summary["ipus"]["reserved"] == 4
    assert len(session_of(sharded).ipus) == 4


class MemoryControls(torch.nn.Module):
    """fc's product (x 512 kB + weight 1 MB + output 2 MB) with a proportion of 0 runs in
    passes of one tile's 611 kB; the head is serialized in 4 over its output channels."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 1024, bias=False)
        self.head = torch.nn.Parameter(torch.randn(1024, 64) / 32)
        self.controlled = True

    def forward(self, x):
        h = self.fc(x)
        if self.controlled:
            h = poptorch.set_available_memory(h, 0.0)
            return poptorch.serializedMatMul(torch.relu(h), self.head,
                                             poptorch.MatMulSerializationMode.OutputChannels, 4)
        return torch.relu(h) @ self.head


@pytest.mark.ipupod(pod="POD4")
def test_4_6_8_and_4_6_9_memory_controls_change_the_plan_not_the_results(server):
    from ipupod.poptorch import export
    torch.manual_seed(3)
    model = MemoryControls().eval()
    x = torch.randn(512, 256)
    client = server.client()
    reports = {}
    for controlled in (False, True):
        model.controlled = controlled
        exported = export.export(model, (x,), ["x"], False, poptorch.PipelinedExecution())
        reports[controlled] = client.compile(exported.onnx, report=True).report["ipus"][0]
    plain, controlled = reports[False], reports[True]
    # fc: 3.7 MB in passes of at most 611 kB (7 passes); the head: 4 passes.
    assert plain["serial_passes_per_micro_batch"] == 0
    assert controlled["serial_passes_per_micro_batch"] == 6 + 3
    assert controlled["temporary_bytes"] < plain["temporary_bytes"]
    assert controlled["compute_s"] > plain["compute_s"]
    # The results are the product's, on the IPU as on the CPU.
    model.controlled = True
    out = poptorch.inferenceModel(model)(x)
    torch.testing.assert_close(out, model(x).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.ipupod(pod="POD4")
def test_set_available_memory_proportion_per_ipu(server):
    from ipupod.poptorch import export
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                poptorch.BeginBlock(torch.nn.Linear(1024, 64), ipu_id=1)).eval()
    x = torch.randn(512, 256)
    opts = poptorch.Options().deviceIterations(2)
    opts.setAvailableMemoryProportion({"IPU0": 0.0, "IPU1": 0.6})
    exported = export.export(model, (x[:256],), ["x"], False, poptorch.PipelinedExecution())
    report = server.client().compile(exported.onnx, set=opts.compile_settings(False).sets,
                                     report=True).report
    # IPU 0's product (256 kB in, 1 MB weight, 1 MB out) in passes of one tile's 611 kB.
    assert report["ipus"][0]["serial_passes_per_micro_batch"] == 3
    assert report["ipus"][1]["serial_passes_per_micro_batch"] == 0
    out = poptorch.inferenceModel(model, opts)(x)
    torch.testing.assert_close(out, model(x).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.ipupod(pod="POD4")
def test_4_8_an_inference_model_keeps_its_buffers_from_run_to_run(server, capsys):
    # seed begin (4.8; `import poptorch` replaced)
    class CounterModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("i", torch.tensor([0.], dtype=torch.float))

        def forward(self):
            self.i += 1
            return self.i

    model = CounterModel()
    poptorch_model = poptorch.inferenceModel(model)

    print(poptorch_model())  # tensor([1.])
    print(poptorch_model())  # tensor([2.])
    # seed end
    assert capsys.readouterr().out.splitlines()[-2:] == ["tensor([1.])", "tensor([2.])"]
    torch.testing.assert_close(poptorch_model(), torch.tensor([3.0]))
    # "not implicitly copied to the host": the module still holds 0 until copyWeightsToHost
    torch.testing.assert_close(model.i, torch.tensor([0.0]))
    poptorch_model.copyWeightsToHost()
    torch.testing.assert_close(model.i, torch.tensor([3.0]))
    poptorch_model.destroy()
