"""PopTorch's buffers (seed 003, 4.8), 16-bit floats (4.7) and inputs whose dim 0 differ,
with ``import ipupod.poptorch as poptorch`` in place of ``import poptorch``, each run on a
private ipupodd and checked against torch on the CPU (or against the casts PopTorch documents,
made explicitly in torch). ``server`` is conftest's private ipupodd.

Lines between ``# seed begin`` and ``# seed end`` are the seed's, unchanged."""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.poptorch import export  # noqa: E402


def half(t):
    """``t`` rounded to float16 and widened again: a float16 value as float32 torch sees it."""
    return t.half().float()


# ---------------------------------------------------------------------- 4.8 buffers


@pytest.mark.ipupod(pod="POD4")
def test_4_8_a_plain_tensor_attribute_is_frozen_when_traced(server, capsys):
    # seed begin (4.8; `import poptorch` replaced)
    class CounterModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.i = torch.tensor([0.], dtype=torch.float)

        def forward(self):
            self.i += 1
            return self.i


    model = CounterModel()
    poptorch_model = poptorch.inferenceModel(model)
    print(poptorch_model())  # tensor([1.])
    print(poptorch_model())  # tensor([1.])
    # seed end
    assert capsys.readouterr().out.splitlines()[-2:] == ["tensor([1.])", "tensor([1.])"]
    assert torch.equal(poptorch_model(), torch.tensor([1.0]))
    # What PopTorch leaves on the host: the one traced forward ran on the CPU tensor
    # (graphcore/poptorch docs/user_guide/buffers.py asserts model.i == [1.] here), however
    # often the export runs the forward.
    assert torch.equal(model.i, torch.tensor([1.0]))
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_a_plain_tensor_attribute_is_a_constant_of_the_compiled_model(server):
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.tensor([2.0, 3.0])
            self.calls = torch.zeros(1)

        def forward(self, x):
            self.calls += 1
            return x * self.scale + self.calls

    model = Scaled()
    scale = model.scale
    poptorch_model = poptorch.inferenceModel(model)
    x = torch.randn(4, 2)
    want = x * torch.tensor([2.0, 3.0]) + 1
    assert torch.equal(poptorch_model(x), want)
    assert torch.equal(model.calls, torch.ones(1)) and model.scale is scale
    model.scale.fill_(10.0)  # the host's attribute is not the compiled constant
    assert torch.equal(poptorch_model(x), want)
    assert torch.equal(model.calls, torch.ones(1))
    poptorch_model.destroy()


class Stats(torch.nn.Module):
    """Buffers updated in place every way the chapter allows: copy_, index assignment, a
    slice's +=, add_ and mul_."""

    def __init__(self, width=32):
        super().__init__()
        self.fc = torch.nn.Linear(width, 16)
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("stats", torch.zeros(width))
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("decay", torch.ones(2))

    def forward(self, x):
        self.mean.copy_(x.mean(0))
        self.stats[0] = x.sum()
        self.stats[1:3] += x[:, :2].sum(0)
        self.count.add_(1)
        self.decay.mul_(0.5)
        return self.fc(x - self.mean) * self.decay[0] + self.count


def assert_buffers_equal(model, reference, exact=False):
    for name, value in reference.named_buffers():
        if exact:
            assert torch.equal(model.get_buffer(name), value), name
        else:
            torch.testing.assert_close(model.get_buffer(name), value, rtol=1e-6, atol=1e-6,
                                       msg=name)


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("width", [32, 4])  # 4: a model of a few hundred bytes
def test_4_8_buffers_updated_in_place_by_an_inference_model(server, width):
    torch.manual_seed(3)
    model = Stats(width)
    reference = copy.deepcopy(model)
    start = copy.deepcopy(model)
    poptorch_model = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(2))
    calls = [torch.randn(6, width), torch.randn(6, width) * 3]
    for x in calls:
        out = poptorch_model(x)
        with torch.no_grad():  # torch runs the call's micro-batches in turn
            want = torch.cat([reference(x[:3]), reference(x[3:])])
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    # "any buffers which your model modifies will not be implicitly copied to the host"
    assert_buffers_equal(model, start, exact=True)
    poptorch_model.copyWeightsToHost()
    assert_buffers_equal(model, reference)
    assert torch.equal(model.count, torch.tensor([4.0]))
    poptorch_model.destroy()


class StatsWithLoss(torch.nn.Module):
    """A training model whose buffers follow its activations and a parameter, next to a
    BatchNorm (whose running statistics the compiler updates by itself)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)
        self.register_buffer("last", torch.zeros(8))
        self.register_buffer("marks", torch.zeros(4))
        self.register_buffer("bias_sum", torch.zeros(1))

    def forward(self, x, target):
        h = torch.relu(self.bn(self.fc(x)))
        with torch.no_grad():
            self.last.copy_(h.mean(0))
            self.marks[0] = h.max()
            self.marks[1:3] += h[:, :2].sum(0)
            self.bias_sum.add_(self.fc.bias[0])  # reads a parameter: the step's weights
        y = self.out(h)
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.ipupod(pod="POD4")
def test_4_8_buffers_updated_in_place_by_a_training_model(server):
    torch.manual_seed(5)
    model = StatsWithLoss()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    poptorch_model = poptorch.trainingModel(model, opts,
                                            torch.optim.SGD(model.parameters(), lr=0.1))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, target = torch.randn(2, 16, 8), torch.randn(2, 16, 3)  # micro-batch 4 x 2 x 2, twice
    for call in range(2):
        poptorch_model(x[call], target[call])
        for update in range(2):  # one update per device iteration, of 2 micro-batches
            optimizer.zero_grad()
            for m in range(2):
                rows = slice(8 * update + 4 * m, 8 * update + 4 * m + 4)
                loss = reference(x[call][rows], target[call][rows])[1]
                (loss / 2).backward()
            optimizer.step()
    poptorch_model.copyWeightsToHost()
    for name, value in reference.named_parameters():
        torch.testing.assert_close(model.get_parameter(name), value, rtol=1e-5, atol=1e-6,
                                   msg=name)
    for name in ("last", "marks", "bias_sum", "bn.running_mean", "bn.running_var"):
        torch.testing.assert_close(model.get_buffer(name), reference.get_buffer(name),
                                   rtol=1e-5, atol=1e-6, msg=name)
    assert model.bias_sum.abs().item() > 0  # the parameter-driven buffer really moved
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_8_replicas_update_one_copy_of_the_buffers_in_data_order(server):
    # broadcastBuffers(True), the default: ipupod keeps one copy, which every micro-batch of
    # every replica updates in data order (replica fastest), as torch running them in turn.
    torch.manual_seed(8)
    model = Stats()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().replicationFactor(2).deviceIterations(2)
    poptorch_model = poptorch.inferenceModel(model, opts)
    x = torch.randn(12, 32)  # micro-batch 3 x replicas 2 x iterations 2
    out = poptorch_model(x)
    with torch.no_grad():
        want = torch.cat([reference(x[3 * j:3 * j + 3]) for j in range(4)])
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    poptorch_model.copyWeightsToHost()
    assert_buffers_equal(model, reference)
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_8_broadcast_buffers_false_gives_each_replica_its_own_buffers(server):
    # seed 003, 4.8: "You can make each replica use its own buffer by setting the PopTorch
    # option broadcastBuffers() to False". Replica r runs micro-batches r, r + 2, ... (replicas
    # vary fastest in the host batch), each on its own copy of the buffers.
    torch.manual_seed(9)
    model = Stats()
    replicas = [copy.deepcopy(model), copy.deepcopy(model)]
    opts = poptorch.Options().replicationFactor(2).deviceIterations(2).broadcastBuffers(False)
    poptorch_model = poptorch.inferenceModel(model, opts)
    for call in range(2):  # the copies persist from call to call
        x = torch.randn(12, 32)  # micro-batch 3 x replicas 2 x iterations 2
        out = poptorch_model(x)
        with torch.no_grad():
            want = torch.cat([replicas[j % 2](x[3 * j:3 * j + 3]) for j in range(4)])
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5, msg=f"call {call}")
    poptorch_model.copyWeightsToHost()  # replica 0's copy comes back
    assert_buffers_equal(model, replicas[0])
    assert model.count.item() == 4.0  # one copy would have counted all 8 micro-batches
    # A write reaches every replica's copy.
    with torch.no_grad():
        model.count.fill_(10.0)
        for r in replicas:
            r.load_state_dict(model.state_dict())
    poptorch_model.copyWeightsToDevice()
    x = torch.randn(12, 32)
    with torch.no_grad():
        want = torch.cat([replicas[j % 2](x[3 * j:3 * j + 3]) for j in range(4)])
    torch.testing.assert_close(poptorch_model(x), want, rtol=1e-5, atol=1e-5)
    poptorch_model.destroy()

    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    class ConstantBuffer(torch.nn.Module):  # PopTorch's test_constant_buffer_with_replicas
        def __init__(self):
            super().__init__()
            self.register_buffer("stuff", torch.tensor([1, 2, 3], dtype=torch.int32))

        def forward(self, x):
            return torch.sum(x + 1.0 + self.stuff)

    constant = poptorch.inferenceModel(ConstantBuffer(), opts)  # a sample per replica
    assert torch.equal(constant(torch.tensor([1.0, 2.0])), torch.tensor([12.0, 15.0]))
    constant.destroy()
    replica = poptorch.inferenceModel(Stats(), poptorch.Options().broadcastBuffers(False))
    replica(torch.randn(2, 32))  # one replica: its buffers are its own
    replica.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_8_an_inference_models_float16_buffer_is_carried_in_float16(server):
    class HalfCounter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", torch.zeros(4, dtype=torch.half))

        def forward(self, x):
            self.acc += x.sum(0)
            return x * 2 + self.acc

    torch.manual_seed(3)
    model = HalfCounter()
    reference = copy.deepcopy(model)
    poptorch_model = poptorch.inferenceModel(model)
    for _ in range(3):  # small integers: every sum exact in float16, so equality is exact
        x = torch.randint(-4, 5, (2, 4)).half()
        out = poptorch_model(x)
        assert out.dtype == torch.half
        assert torch.equal(out, reference(x))
    poptorch_model.copyWeightsToHost()
    assert model.acc.dtype == torch.half and torch.equal(model.acc, reference.acc)
    with torch.no_grad():  # 2049 is not a float16: the buffer really is float16 on the device
        model.acc.fill_(2048.0)
        reference.acc.fill_(2048.0)
    poptorch_model.copyWeightsToDevice()
    x = torch.ones(2, 4).half() * 0.5
    assert torch.equal(poptorch_model(x), reference(x))
    poptorch_model.destroy()


# ---------------------------------------------------------------------- 4.7 float16


@pytest.mark.ipupod(pod="POD4")
def test_4_7_float32_weights_are_converted_for_a_float16_input(server):
    # "the parameters will be converted to float16 if you call an operation with a float16
    # input": the Linear runs on float16 operands (its float32 weights rounded) and returns
    # float16; the weights stay float32 on the host.
    torch.manual_seed(1)
    model = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16).half()
    out = poptorch.inferenceModel(model)(x)
    assert out.dtype == torch.half and model.weight.dtype == torch.float
    with torch.no_grad():  # torch with the same casts, made explicitly
        want = (x.float() @ half(model.weight).t() + half(model.bias)).half()
    assert torch.equal(out, want)


@pytest.mark.ipupod(pod="POD4")
def test_4_7_float32_weights_train_in_float32_on_float16_inputs(server):
    class Fit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x, target):
            out = self.fc(x)
            return out, torch.nn.functional.mse_loss(out.float(), target)

    torch.manual_seed(2)
    model = Fit()
    w, b = model.fc.weight.detach().clone(), model.fc.bias.detach().clone()
    x, target = torch.randn(4, 8).half(), torch.randn(4, 4)
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(),
                                                                       lr=0.1))
    for _ in range(3):
        out, loss = training(x, target)
    assert out.dtype == torch.half and loss.dtype == torch.float
    training.copyWeightsToHost()
    assert model.fc.weight.dtype == torch.float
    # The update in float32 of gradients that reached the float16 operands (rounded there,
    # as ipupod rounds every float16 value, docs/differences.md "float16"), worked by hand.
    with torch.no_grad():
        for _ in range(3):
            out = (x.float() @ half(w).t() + half(b)).half().float()
            d_out = half(2 * (out - target) / out.numel())
            w -= 0.1 * half(d_out.t() @ x.float())
            b -= 0.1 * half(d_out.sum(0))
    assert torch.equal(model.fc.weight, w) and torch.equal(model.fc.bias, b)
    training.destroy()


class HalfThenFloat(torch.nn.Module):
    """One submodule .half(), one float32; a float16 and a float32 input."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8).half()
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        h = self.a(x)      # float16 weights, float16 input: float16
        z = self.b(h)      # float32 weights, float16 input: converted, float16
        mixed = h + y      # float16 + float32 inputs: float32, as torch promotes
        back = self.b(y)   # float32 all through
        return z, mixed, back


@pytest.mark.ipupod(pod="POD4")
def test_4_7_a_model_with_float16_and_float32_parameters_and_inputs(server):
    torch.manual_seed(4)
    model = HalfThenFloat()
    x, y = torch.randn(6, 8).half(), torch.randn(6, 8)
    z, mixed, back = poptorch.inferenceModel(model)(x, y)
    assert (z.dtype, mixed.dtype, back.dtype) == (torch.half, torch.float, torch.float)
    assert model.a.weight.dtype == torch.half and model.b.weight.dtype == torch.float
    with torch.no_grad():
        h = (x.float() @ model.a.weight.float().t() + model.a.bias.float()).half()
        assert torch.equal(z, (h.float() @ half(model.b.weight).t()
                               + half(model.b.bias)).half())
        assert torch.equal(mixed, h.float() + y)
        torch.testing.assert_close(back, model.b(y), rtol=1e-6, atol=1e-6)


@pytest.mark.ipupod(pod="POD4")
def test_4_7_mixed_inputs_follow_torchs_type_promotion(server):
    class SimpleAdder(torch.nn.Module):  # PopTorch's half_test.py test_simple_model
        def forward(self, x, y, z, w):
            return x + y + 5, z + w + 5

    t1, t2 = torch.tensor([1.]).half(), torch.tensor([2.]).half()
    t3, t4 = torch.tensor([3.]), torch.tensor([4.])
    out_half, out_float = poptorch.inferenceModel(SimpleAdder())(t1, t2, t3, t4)
    assert out_half.dtype == torch.half and out_half.float() == 8.0
    assert out_float.dtype == torch.float and out_float == 12.0

    class Promotions(torch.nn.Module):
        def forward(self, x, y):
            return (x + y,                                  # float16 + float32: float32
                    x * torch.tensor(3.0),                  # a 0-dim float32: float16
                    x + torch.tensor([1.0, 2.0, 3.0]),      # a float32 constant: float32
                    x + torch.ones(3, dtype=x.dtype),       # x's type: float16
                    torch.zeros_like(x) + x.half() * 2,     # float16 all through
                    y.half() + x)                           # float16

    x, y = torch.tensor([0.1, 0.2, 0.3]).half(), torch.tensor([1.0, 2.0, 3.0])
    got = poptorch.inferenceModel(Promotions())(x, y)
    want = (x.float() + y, (x.float() * 3).half(), x.float() + torch.tensor([1.0, 2.0, 3.0]),
            (x.float() + 1).half(), (x.float() * 2).half(), (half(y) + x.float()).half())
    for index, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and torch.equal(g, w), (index, g, w)


@pytest.mark.ipupod(pod="POD4")
def test_4_7_a_float32_buffer_updated_from_float16_values_stays_float32(server):
    class Accumulate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", torch.zeros(4))
            self.register_buffer("product", torch.ones(4))

        def forward(self, x):
            self.acc += x.sum(0)      # a float16 sum, added in float32
            self.product.mul_(x[0])   # float32 times float16: float32
            return x * 2, self.acc

    model = Accumulate()
    poptorch_model = poptorch.inferenceModel(model)
    x = (torch.randn(3, 4) * 3).half()
    acc, product = torch.zeros(4), torch.ones(4)
    for _ in range(2):
        doubled, now = poptorch_model(x)
        acc += half(x.float().sum(0))
        product *= x[0].float()
        assert doubled.dtype == torch.half and torch.equal(doubled, (x.float() * 2).half())
        assert now.dtype == torch.float and torch.equal(now, acc)
    poptorch_model.copyWeightsToHost()
    assert torch.equal(model.acc, acc) and torch.equal(model.product, product)
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_7_a_float16_batchnorm_reads_float32_running_statistics(server):
    # PopTorch's half_test.py test_buffers: BatchNorm .half(), its statistics float32 again
    torch.manual_seed(42)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(4)
            self.bn.running_mean += torch.randn(4)
            self.bn.running_var += torch.rand(4)

        def forward(self, i):
            return self.bn(i), self.bn.running_var, self.bn.running_mean

    model = M()
    model.bn.half()
    model.bn.running_mean = model.bn.running_mean.to(torch.float)
    model.bn.running_var = model.bn.running_var.to(torch.float)
    x = torch.randn(2, 4, 3, 3).half()
    out, var, mean = poptorch.inferenceModel(model)(x)
    bn = model.bn
    with torch.no_grad():
        shape = (1, 4, 1, 1)
        want = ((x.float() - half(bn.running_mean).view(shape))
                / torch.sqrt(half(bn.running_var).view(shape) + bn.eps)
                * bn.weight.float().view(shape) + bn.bias.float().view(shape)).half()
    assert out.dtype == torch.half and torch.equal(out, want)
    assert torch.equal(var, bn.running_var) and torch.equal(mean, bn.running_mean)


def test_4_7_the_exported_graph_keeps_each_tensors_type():
    from onnx import TensorProto
    import onnx
    exported = export.export(HalfThenFloat(), (torch.randn(2, 8).half(), torch.randn(2, 8)),
                             ["x", "y"], False, poptorch.PipelinedExecution())
    graph = onnx.load_from_string(exported.onnx).graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.input) + list(graph.output)}
    types.update({i.name: i.data_type for i in graph.initializer})
    assert types["x"] == types["a.weight"] == types["output_0"] == TensorProto.FLOAT16
    assert types["y"] == types["b.weight"] == types["output_1"] == TensorProto.FLOAT
    casts = [(n.input[0], n.attribute[0].i) for n in graph.node if n.op_type == "Cast"]
    assert ("b.weight", TensorProto.FLOAT16) in casts and ("b.bias", TensorProto.FLOAT16) in casts
    assert not any(v.type.tensor_type.elem_type == TensorProto.DOUBLE
                   for v in list(graph.value_info) + list(graph.output))


# ---------------------------------------------------------------------- batch rule


class SamplesAndTokens(torch.nn.Module):
    """An input of samples [B, 4] and one of their tokens [B x 5, 2]."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.emb = torch.nn.Linear(2, 3)

    def forward(self, x, tokens, target=None):
        per_token = self.emb(tokens).reshape(x.shape[0], 5, 3)
        out = self.fc(x) + per_token.sum(1)
        if target is None:
            return out, per_token
        return out, torch.nn.functional.mse_loss(out, target)


@pytest.mark.ipupod(pod="POD4")
def test_inputs_whose_dim_0_differ_each_split_into_their_own_micro_batches(server):
    torch.manual_seed(6)
    model = SamplesAndTokens()
    poptorch_model = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(2))
    x, tokens = torch.randn(6, 4), torch.randn(30, 2)
    out, per_token = poptorch_model(x, tokens)
    with torch.no_grad():
        want = [model(x[:3], tokens[:15]), model(x[3:], tokens[15:])]
    torch.testing.assert_close(out, torch.cat([w[0] for w in want]), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(per_token, torch.cat([w[1] for w in want]), rtol=1e-6,
                               atol=1e-6)
    with pytest.raises(ValueError, match="30 samples in input 'tokens'"):
        poptorch_model(x, tokens[:20])
    with pytest.raises(ValueError, match=r"input 'tokens' has shape \[25, 2\].*multiple of 2"):
        poptorch.inferenceModel(SamplesAndTokens(),
                                poptorch.Options().deviceIterations(2))(x, tokens[:25])
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_inputs_whose_dim_0_differ_train_with_replicas_and_accumulation(server):
    torch.manual_seed(7)
    model = SamplesAndTokens()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    x, tokens, target = torch.randn(16, 4), torch.randn(80, 2), torch.randn(16, 3)
    training(x, tokens, target)  # micro-batches of 2 samples and 10 tokens
    training.copyWeightsToHost()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for update in range(2):  # 2 replicas x 2 accumulated micro-batches per update
        optimizer.zero_grad()
        for m in range(4):
            j = 4 * update + m
            loss = reference(x[2 * j:2 * j + 2], tokens[10 * j:10 * j + 10],
                             target[2 * j:2 * j + 2])[1]
            (loss / 4).backward()
        optimizer.step()
    for name, value in reference.named_parameters():
        torch.testing.assert_close(model.get_parameter(name), value, rtol=1e-5, atol=1e-6,
                                   msg=name)
    training.destroy()
