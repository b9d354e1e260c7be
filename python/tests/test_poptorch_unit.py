"""ipupod.poptorch without a server: options, the optimizer mapping, the export (losses
torch 1.13 lacks, blocks to __ipu_number attributes), PopTorch's batch rule, and the local
checks of Client.compile."""

import inspect

import grpc
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import ipupod  # noqa: E402
import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.poptorch import export, optim  # noqa: E402


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)

    def forward(self, x, target=None):
        y = self.layer2(torch.relu(self.layer1(x)))
        if target is None:
            return y
        return y, torch.nn.functional.mse_loss(y, target)


def placements(exported):
    model = onnx.load_from_string(exported.onnx)
    return [(node.op_type, {a.name: a.i for a in node.attribute if a.name.startswith("__")})
            for node in model.graph.node]


# ---------------------------------------------------------------------- options

def test_options_become_ipu_config_overrides_for_training_and_inference():
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.Training.gradientAccumulation(3)
    opts.outputMode(poptorch.OutputMode.All).autoRoundNumIPUs(True)
    assert opts.compile_settings(True).sets == [
        "device_iterations=4", "replication_factor=2", "gradient_accumulation_steps=3",
        "output_mode=all", "auto_round_num_ipus=true", "enable_half_partials=false"]
    assert opts.compile_settings(False).sets == [
        "inference_device_iterations=4", "inference_replication_factor=2",
        "inference_output_mode=all", "auto_round_num_ipus=true", "enable_half_partials=false"]
    every = poptorch.Options().outputMode(poptorch.OutputMode.EveryN, 2)
    assert "output_mode=every_n:2" in every.compile_settings(True).sets


def test_available_memory_proportion_becomes_matmul_proportion():
    same = poptorch.Options().setAvailableMemoryProportion({"IPU0": 0.3, "IPU1": 0.3})
    assert same.compile_settings(True).sets[-1:] == ["matmul_proportion=0.3"]
    assert same.compile_settings(False).sets[-1:] == ["inference_matmul_proportion=0.3"]
    per_ipu = poptorch.Options().setAvailableMemoryProportion({"IPU1": 0.2, "IPU0": 0.5})
    assert per_ipu.compile_settings(True).sets[-2:] == [
        "ipus_per_replica=2", "matmul_proportion=[0.5 0.2]"]
    assert per_ipu.compile_settings(False).sets[-2:] == [
        "inference_ipus_per_replica=2", "inference_matmul_proportion=[0.5 0.2]"]
    for bad, match in [({"IPU0": 1.5}, "between 0 and 1"), ({"ipu0": 0.5}, "keys are 'IPU0'"),
                       ({"IPU1": 0.5}, r"names IPUs \[1\]; name every IPU"), ({}, "name every")]:
        with pytest.raises(ValueError, match=match):
            poptorch.Options().setAvailableMemoryProportion(bad)


def test_options_load_from_a_file_of_setter_calls(tmp_path):
    path = tmp_path / "poptorch.conf"
    path.write_text("deviceIterations(1)\nsetExecutionStrategy(poptorch.ShardedExecution())\n"
                    "replicationFactor(2)\nTraining.gradientAccumulation(2)\n")
    opts = poptorch.Options()
    opts.loadFromFile(str(path))
    assert opts.replication_factor == 2 and opts.Training.gradient_accumulation == 2
    assert "sharded_execution_for_inference=true" in opts.compile_settings(False).sets
    path.write_text("deviceIterations(0)\n")
    with pytest.raises(ValueError, match="poptorch.conf:1.*positive integer"):
        poptorch.Options().loadFromFile(str(path))


def test_a_config_file_names_the_enums_strategies_and_option_classes_poptorch_exports(tmp_path):
    # options.py makes the namespace a file's `poptorch.` names itself (the package imports
    # options, so options cannot import the package): it holds the same objects
    path = tmp_path / "poptorch.conf"
    path.write_text("outputMode(poptorch.OutputMode.Sum)\n"
                    "setExecutionStrategy(poptorch.PipelinedExecution("
                    "poptorch.AutoStage.AutoIncrement))\n")
    opts = poptorch.Options().loadFromFile(str(path))
    assert opts.output_mode is poptorch.OutputMode.Sum
    assert opts.execution_strategy.auto_stage is poptorch.AutoStage.AutoIncrement
    from ipupod.poptorch import blocks, enums, options
    names = vars(options._config_names())
    exported = [name for name in poptorch.__all__ if isinstance(getattr(poptorch, name), type)
                and getattr(poptorch, name).__module__ in (enums.__name__, blocks.__name__,
                                                           options.__name__)]
    assert len(exported) > 20
    for name in exported:
        assert names[name] is getattr(poptorch, name), name
    path.write_text("outputMode(poptorch.trainingModel)\n")  # a name no setter takes
    with pytest.raises(poptorch.ConfigFileError, match="poptorch.conf:1"):
        poptorch.Options().loadFromFile(str(path))


def test_bad_and_unmodelled_options_say_what_to_do():
    with pytest.raises(ValueError, match="positive integer"):
        poptorch.Options().deviceIterations(0)
    with pytest.raises(ValueError, match="output_return_period"):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)
    with pytest.raises(AttributeError):
        poptorch.Options().Precision.setStochasticRounding(True)
    assert "synthetic_data=true" in poptorch.Options().enableSyntheticData(
        True).compile_settings(True).sets
    sharded = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    assert "execution_strategy=sharded" in sharded.compile_settings(True).sets
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(True)
    assert "auto_loss_scaling=true" in opts.compile_settings(True).sets
    assert "auto_loss_scaling=true" not in opts.compile_settings(False).sets
    assert "enable_half_partials=false" in opts.compile_settings(False).sets  # PopTorch's float
    opts.Precision.setPartialsType(torch.half)
    assert "enable_half_partials=true" in opts.compile_settings(False).sets
    config = poptorch.Options().ipuConfig('{"layers_per_ipu": [1, 1]}')
    assert config.ipu_config == {"layers_per_ipu": [1, 1]}


# ---------------------------------------------------------------------- optimizers

def test_poptorch_optimizers_mark_explicit_arguments_as_variables():
    params = TwoLayers().parameters()
    # the seed's 4.5.4 cases
    spec = optim.describe(poptorch.optim.SGD(params, lr=0.01, momentum=0.0,
                                             use_combined_accum=False))
    assert "momentum" not in spec.constants and spec.attrs["momentum"] == 0.0
    spec = optim.describe(poptorch.optim.SGD(TwoLayers().parameters(), lr=0.01))
    assert "momentum" in spec.constants and spec.attrs == {"lr": 0.01}
    opt = poptorch.optim.SGD(TwoLayers().parameters(), lr=0.01, momentum=0.9, loss_scaling=2.0)
    opt.variable_attrs.markAsConstant("momentum")
    spec = optim.describe(opt)
    assert "momentum" in spec.constants and spec.attrs["momentum"] == 0.9  # off its default
    opt.variable_attrs.markAsVariable("dampening")
    assert not opt.variable_attrs.isConstant("dampening")
    with pytest.raises(ValueError, match="lr is always a variable"):
        opt.variable_attrs.markAsConstant("lr")


def test_native_optimizers_make_attributes_off_their_defaults_variables():
    params = list(TwoLayers().parameters())
    assert optim.describe(torch.optim.SGD(params, lr=0.01)).constants >= {"momentum"}
    assert "momentum" in optim.describe(torch.optim.SGD(params, lr=0.01,
                                                        momentum=0.0)).constants
    assert "momentum" not in optim.describe(torch.optim.SGD(params, lr=0.01,
                                                            momentum=1.0)).constants
    adam = optim.describe(torch.optim.Adam(params, lr=0.01, betas=(0.8, 0.999)))
    assert adam.name == "adam" and adam.attrs == {"lr": 0.01, "beta1": 0.8}
    assert optim.describe(torch.optim.RMSprop(params, centered=True)).attrs["centered"] == 1.0
    assert optim.describe(poptorch.optim.LAMB(params)).name == "lamb"
    assert optim.describe(torch.optim.AdamW(params)).name == "adamw"


def test_unsupported_optimizers_and_changed_constants_are_refused():
    params = list(TwoLayers().parameters())
    with pytest.raises(ValueError, match="not Adagrad"):
        optim.describe(torch.optim.Adagrad(params))
    with pytest.raises(ValueError, match="needs the model"):
        optim.describe(torch.optim.SGD([{"params": params[:2], "lr": 0.1},
                                        {"params": params[2:]}], lr=0.01))
    with pytest.raises(ValueError, match="maximize"):
        optim.describe(torch.optim.SGD(params, lr=0.1, maximize=True))
    compiled = optim.describe(poptorch.optim.SGD(params, lr=0.01))
    assert optim.changes(compiled, optim.describe(poptorch.optim.SGD(params, lr=0.5))) == {
        "lr": 0.5}
    with pytest.raises(ValueError, match="'momentum' is a constant"):
        optim.changes(compiled, optim.describe(poptorch.optim.SGD(params, lr=0.01,
                                                                  momentum=0.5)))
    with pytest.raises(ValueError, match="compiled with sgd, not adam"):
        optim.changes(compiled, optim.describe(torch.optim.Adam(params)))


def test_param_groups_map_to_the_compilers_groups_by_parameter_name():
    model = TwoLayers()
    decay = [model.layer1.weight, model.layer2.weight]
    no_decay = [model.layer1.bias, model.layer2.bias]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=5e-5)
    spec = optim.describe(opt, model)
    assert spec.name == "adamw" and spec.values["weight_decay"] == 0.01
    assert [g.weights for g in spec.groups] == [["layer1.weight", "layer2.weight"],
                                                ["layer1.bias", "layer2.bias"]]
    # lr always; weight_decay 0 is off torch's default (a variable) and off group 0's
    assert spec.groups[0].attrs == {"lr": 5e-5}
    assert spec.groups[1].attrs == {"lr": 5e-5, "weight_decay": 0.0}
    assert optim.compile_groups(spec, ["layer1.weight", "layer1.bias", "layer2.bias"]) == [
        {"params": ["layer1.weight"], "lr": 5e-5},
        {"params": ["layer1.bias", "layer2.bias"], "lr": 5e-5, "weight_decay": 0.0}]
    single = optim.describe(torch.optim.AdamW(model.parameters()), model)
    assert single.groups == () and optim.compile_groups(single, ["layer1.weight"]) == []


def halves(model, **second):
    """Two param groups (torch fills in their dicts: make new ones every time)."""
    return [{"params": [model.layer1.weight, model.layer1.bias]},
            {"params": [model.layer2.weight, model.layer2.bias], **second}]


def test_set_optimizer_changes_map_to_group_variables():
    model = TwoLayers()
    compiled = optim.describe(poptorch.optim.SGD(halves(model, lr=0.5), lr=0.1, momentum=0.9),
                              model)
    opt = poptorch.optim.SGD(halves(model, lr=0.5), lr=0.1, momentum=0.9)
    opt.param_groups[1]["lr"] = 0.25
    opt.param_groups[0]["momentum"] = 0.5
    changed = optim.changes(compiled, optim.describe(opt, model))
    assert changed == {"group/1/lr": 0.25, "group/0/momentum": 0.5}
    now = optim.applied(compiled, changed)
    assert now.groups[1].values["lr"] == 0.25 and now.groups[0].values["momentum"] == 0.5
    assert optim.changes(now, optim.describe(opt, model)) == {}
    opt.param_groups[1]["dampening"] = 0.5  # not passed: a constant
    with pytest.raises(ValueError, match="'dampening' is a constant"):
        optim.changes(now, optim.describe(opt, model))
    regrouped = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="param groups changed"):
        optim.changes(compiled, optim.describe(regrouped, model))


def test_what_poptorch_takes_once_per_optimizer_must_agree_across_groups():
    model = TwoLayers()
    opt = poptorch.optim.SGD(halves(model), lr=0.1, momentum=0.9, loss_scaling=2.0)
    opt.param_groups[1]["loss_scaling"] = 4.0
    with pytest.raises(ValueError, match="param groups differ in 'loss_scaling'.*set it on "
                                         "the optimizer"):
        optim.describe(opt, model)
    with pytest.raises(ValueError, match="differ in 'nesterov'"):
        optim.describe(torch.optim.SGD(halves(model, nesterov=True), lr=0.1, momentum=0.9),
                       model)
    with pytest.raises(ValueError, match="differ in 'amsgrad'"):
        optim.describe(torch.optim.Adam(halves(model, amsgrad=True)), model)
    velocity = poptorch.optim.SGD(halves(model), lr=0.1, momentum=0.9, velocity_scaling=2.0)
    velocity.param_groups[1]["velocity_scaling"] = 8.0  # may differ (seed 003, 4.5)
    spec = optim.describe(velocity, model)
    assert spec.groups[1].attrs["velocity_scaling"] == 8.0
    other = TwoLayers()
    with pytest.raises(ValueError, match="not parameters of the model"):
        optim.describe(torch.optim.SGD([{"params": other.parameters()},
                                        {"params": model.parameters()}], lr=0.1), model)


def test_lamb_steps_on_the_cpu_too():
    torch.manual_seed(0)
    model = TwoLayers()
    opt = poptorch.optim.LAMB(model.parameters(), lr=0.01)
    x, target = torch.randn(8, 5), torch.randn(8, 5)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        _, loss = model(x, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# ---------------------------------------------------------------------- export

def test_mse_loss_exports_as_the_ops_it_is_made_of():
    exported = export.export(TwoLayers(), (torch.randn(2, 5), torch.randn(2, 5)),
                             ["x", "target"], True, poptorch.PipelinedExecution())
    ops = [op for op, _ in placements(exported)]
    assert ops[-3:] == ["Sub", "Mul", "ReduceMean"]
    assert exported.scalar_outputs == ["output_1"] and export.loss_name(exported) == "output_1"
    assert exported.weights == ["layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"]
    assert exported.structure == ("tensor", "tensor")


def test_a_training_model_must_return_its_loss():
    exported = export.export(TwoLayers(), (torch.randn(2, 5),), ["x"], True,
                             poptorch.PipelinedExecution())
    with pytest.raises(ValueError, match="return its loss"):
        export.loss_name(exported)


def test_begin_block_places_the_layer_and_what_follows():
    model = TwoLayers()
    model.layer2 = poptorch.BeginBlock(model.layer2, ipu_id=1)
    exported = export.export(model, (torch.randn(2, 5),), ["x"], False,
                             poptorch.PipelinedExecution())
    assert exported.block_ipus == 2
    assert placements(exported) == [("Gemm", {"__ipu_number": 0}), ("Relu", {"__ipu_number": 0}),
                                    ("Gemm", {"__ipu_number": 1})]
    assert model(torch.randn(3, 5)).shape == (3, 5)  # still runs on the CPU


def test_blocks_follow_stages_and_block_functions():
    class Staged(TwoLayers):
        def forward(self, x):
            with poptorch.Block("A"):
                x = torch.relu(self.layer1(x))
            return self.second(x)

        @poptorch.BlockFunction("B")
        def second(self, x):
            return self.layer2(x) * 2

    strategy = poptorch.PipelinedExecution(poptorch.Stage("A").ipu(1), poptorch.Stage("B").ipu(3))
    exported = export.export(Staged(), (torch.randn(2, 5),), ["x"], False, strategy)
    assert exported.block_ipus == 4
    assert [p["__ipu_number"] for _, p in placements(exported)] == [1, 1, 3, 3, 3]
    assert [p["__pipeline_stage"] for _, p in placements(exported)] == [0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="block 'A' has no ipu_id"):
        export.export(Staged(), (torch.randn(2, 5),), ["x"], False, poptorch.PipelinedExecution())


def test_is_running_on_ipu_only_while_exported():
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(poptorch.isRunningOnIpu())
            return x + 1

    Probe()(torch.zeros(1))
    export.export(Probe(), (torch.zeros(1),), ["x"], False, poptorch.PipelinedExecution())
    assert seen[0] is False and all(seen[1:]) and not poptorch.isRunningOnIpu()


def test_identity_loss_reduces_as_asked():
    x = torch.tensor([1.0, 2.0, 3.0])
    assert poptorch.identity_loss(x, reduction="sum").item() == 6.0
    assert poptorch.identity_loss(x, reduction="mean").item() == 2.0
    with pytest.raises(ValueError, match="reduction"):
        poptorch.identity_loss(x, reduction="max")


def test_the_call_batch_is_split_by_poptorchs_rule():
    x = torch.zeros(24, 5)
    assert export.micro_batch([x, x], ["x", "y"], 4 * 2 * 3, "rule") == 1
    with pytest.raises(ValueError, match=r"input 'x' has shape \[10, 5\].*multiple of 4"):
        export.micro_batch([torch.zeros(10, 5)], ["x"], 4, "rule")
    # each input its own micro-batch (PopTorch: dim 0 a multiple of the factor, no more)
    assert export.micro_batches([torch.zeros(4, 5), torch.zeros(8, 5)], ["x", "y"], 4,
                                "rule") == [1, 2]
    with pytest.raises(ValueError, match=r"input 'y' has shape \[6, 5\].*multiple of 4"):
        export.micro_batches([torch.zeros(4, 5), torch.zeros(6, 5)], ["x", "y"], 4, "rule")


def test_a_model_torch_cannot_export_says_what_to_do():
    class Spectral(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    model = poptorch.inferenceModel(Spectral(), poptorch.Options().server("127.0.0.1:1"))
    with pytest.raises(poptorch.Error, match="cannot export.*fft.*register_custom_op_symbolic"):
        model(torch.randn(4, 4))


class MemoryControlled(torch.nn.Module):
    """fc's product gets 10% of the memory; the head is serializedMatMul's."""

    def __init__(self, mode=poptorch.MatMulSerializationMode.OutputChannels, factor=4):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16, bias=False)
        self.head = torch.nn.Parameter(torch.randn(16, 8))
        self.mode, self.factor = mode, factor

    def forward(self, x):
        h = poptorch.set_available_memory(self.fc(x), 0.1)
        return poptorch.serializedMatMul(torch.relu(h), self.head, self.mode, self.factor)


def attributes(exported):
    model = onnx.load_from_string(exported.onnx)
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    assert all(o.domain != "ai.graphcore" for o in model.opset_import)
    return [(node.op_type, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute})
            for node in model.graph.node]


def test_memory_controls_become_attributes_of_their_ops():
    model = MemoryControlled()
    x = torch.randn(4, 8)
    exported = export.export(model, (x,), ["x"], False, poptorch.PipelinedExecution())
    nodes = [n for n in attributes(exported) if n[0] != "Transpose"]  # of fc's weight
    assert [op for op, _ in nodes] == ["MatMul", "Relu", "MatMul"]
    assert nodes[0][1]["available_memory_proportion"] == pytest.approx(0.1)
    assert nodes[2][1] == {"serialization_mode": b"output_channels", "serialization_factor": 4}
    graph = onnx.load_from_string(exported.onnx).graph
    assert graph.node[-1].output[0] == graph.output[0].name  # the model's output keeps its name
    # On the CPU both are the plain computation.
    assert torch.equal(model(x), torch.relu(x @ model.fc.weight.T) @ model.head)
    disabled = MemoryControlled(poptorch.MatMulSerializationMode.Disabled)
    assert "serialization_mode" not in attributes(export.export(
        disabled, (x,), ["x"], False, poptorch.PipelinedExecution()))[-1][1]


def test_memory_controls_refuse_what_they_cannot_apply_to():
    with pytest.raises(ValueError, match="between 0 and 1"):
        poptorch.set_available_memory(torch.ones(2), 1.5)
    with pytest.raises(ValueError, match="positive integer"):
        poptorch.serializedMatMul(torch.ones(2, 2), torch.ones(2, 2),
                                  poptorch.MatMulSerializationMode.ReducingDim, 0)
    with pytest.raises(ValueError, match="MatMulSerializationMode"):
        poptorch.serializedMatMul(torch.ones(2, 2), torch.ones(2, 2), "reducing_dim", 2)

    class OnARelu(torch.nn.Module):
        def forward(self, x):
            return poptorch.set_available_memory(torch.relu(x), 0.3)

    with pytest.raises(ValueError, match="set_available_memory applies to the output of a "
                                         "MatMul or Gemm or Conv or Gather; its tensor is made "
                                         "by Relu node"):
        export.export(OnARelu(), (torch.randn(2, 3),), ["x"], False,
                      poptorch.PipelinedExecution())


class Checkpointed(torch.nn.Module):
    """Checkpoints a product whose memory is also set, a Relu, a tuple and the input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4, bias=False)

    def forward(self, x):
        x = poptorch.recomputationCheckpoint(x)  # a model input: nothing to mark
        h = poptorch.recomputationCheckpoint(poptorch.set_available_memory(self.fc(x), 0.2))
        a, b = poptorch.recomputationCheckpoint(torch.relu(h), torch.sigmoid(h))
        (c,) = poptorch.recomputationCheckpoint([a + b])
        return c


def test_recomputation_checkpoints_become_attributes_of_their_ops():
    model, x = Checkpointed(), torch.randn(2, 4)
    exported = export.export(model, (x,), ["x"], True, poptorch.PipelinedExecution())
    marked = {op: attrs for op, attrs in attributes(exported) if "recompute_checkpoint" in attrs}
    assert sorted(marked) == ["Add", "MatMul", "Relu", "Sigmoid"]
    assert marked["MatMul"]["available_memory_proportion"] == pytest.approx(0.2)
    assert all(attrs["recompute_checkpoint"] == 1 for attrs in marked.values())
    # On the CPU the checkpoints are the tensors themselves; PopTorch's return shapes.
    t = torch.ones(2)
    assert poptorch.recomputationCheckpoint(t) is t
    assert isinstance(poptorch.recomputationCheckpoint(t, t), tuple)
    assert isinstance(poptorch.recomputationCheckpoint([t]), list)
    assert torch.equal(model(x), torch.relu(model.fc(x)) + torch.sigmoid(model.fc(x)))
    with pytest.raises(ValueError, match="recomputationCheckpoint takes tensors"):
        poptorch.recomputationCheckpoint(t, 3)


def test_a_checkpointed_input_returned_as_it_came_stays_an_output():
    class Echo(torch.nn.Module):
        def forward(self, x):
            return poptorch.recomputationCheckpoint(x)

    exported = export.export(Echo(), (torch.ones(2),), ["x"], False,
                             poptorch.PipelinedExecution())
    assert [op for op, _ in attributes(exported)] == ["Identity"]


class Outlined(torch.nn.Module):
    """optimum's outline_attribute on ``norm``, an explicit Attribute around ``fc``."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)
        context = poptorch.Attribute(__outline={"layer": "LayerNorm"})
        self.norm.register_forward_pre_hook(lambda *args: context.__enter__())
        self.norm.register_forward_hook(lambda *args: context.__exit__(None, None, None))

    def forward(self, x):
        with poptorch.Attribute(__outline={"layer": "Linear", "kind": "fc"}):
            with poptorch.Attribute(__outline={"layer": "Inner"}):
                y = self.fc(x)
        return self.norm(y)


def test_attributes_are_written_on_the_ops_inside_them():
    model, x = Outlined(), torch.randn(2, 4)
    exported = export.export(model, (x,), ["x"], False, poptorch.PipelinedExecution())
    nodes = onnx.load_from_string(exported.onnx).graph.node
    outline = {n.name: onnx.helper.get_attribute_value(a) for n in nodes for a in n.attribute
               if a.name == "__outline"}
    fc = [v for name, v in outline.items() if "/fc/" in name]
    norm = [v for name, v in outline.items() if "/norm/" in name]
    assert fc and all(v == [b"kind", b"fc", b"layer", b"Inner"] for v in fc)  # inner key wins
    assert norm and all(v == [b"layer", b"LayerNorm"] for v in norm)
    assert len(outline) == len(nodes)  # every op is inside one
    with torch.no_grad():
        assert torch.equal(model(x), model.norm(model.fc(x)))  # nothing on the CPU


def test_attributes_refuse_what_popart_would_not_take():
    with pytest.raises(ValueError, match="'outline' is not one of PopART's builder attributes"):
        poptorch.Attribute(outline={"layer": "A"})
    with pytest.raises(ValueError, match="must be a dict of strings to strings"):
        poptorch.Attribute(__outline={"layer": 3})
    with pytest.raises(ValueError, match="must be a dict of strings to strings"):
        poptorch.Attribute(__outline="layer")
    with pytest.raises(ValueError, match="__ipu_number is placement"):
        poptorch.Attribute(__ipu_number={"ipu": "1"})


class SharedMemory(torch.nn.Module):
    """Parameters that are views of another's memory, as optimum's SerializedEmbedding's."""

    def __init__(self, view):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 3))
        self.part = torch.nn.Parameter(view(self.table).detach())

    def forward(self, ids):
        return self.table[ids].sum() + self.part.sum()


def test_a_parameter_in_another_ones_memory_is_exported_as_its_slice():
    rows = SharedMemory(lambda t: t[2:4])
    assert export.parameter_views(rows) == [
        export.ParameterView("part", "table", 2, 4, True, (2, 3))]
    flat = SharedMemory(lambda t: t.view(-1)[4:8])
    assert export.parameter_views(flat) == [
        export.ParameterView("part", "table", 4, 8, False, (4,))]
    ids = torch.tensor([0, 3])
    exported = export.export(rows, (ids,), ["ids"], True, poptorch.PipelinedExecution())
    assert exported.weights == ["table"]
    assert ("Slice", {}) in attributes(exported)
    assert isinstance(rows.part, torch.nn.Parameter)  # the module is as it was
    assert "part" in dict(rows.named_parameters())
    torch.testing.assert_close(rows(ids), rows.table[ids].sum() + rows.table[2:4].sum())


def test_parameters_that_overlap_without_one_holding_the_other_are_refused():
    model = SharedMemory(lambda t: t[2:4])
    model.other = torch.nn.Parameter(model.table.detach().view(-1)[7:14])  # rows 2-4, ragged
    model.table = torch.nn.Parameter(model.table.detach()[:3])  # rows 0-2 only
    with pytest.raises(ValueError, match="share memory and neither is a contiguous block"):
        export.parameter_views(model)
    transposed = SharedMemory(lambda t: t.t())
    with pytest.raises(ValueError, match="share memory and neither is a contiguous block"):
        export.parameter_views(transposed)


def test_errors_are_ipupods_under_poptorchs_names():
    assert poptorch.Error is ipupod.Error
    assert poptorch.RecoverableError is ipupod.RecoverableError
    assert poptorch.UnrecoverableError is ipupod.UnrecoverableError


# ---------------------------------------------------------------------- Client.compile

def test_client_compile_checks_its_arguments_before_sending():
    client = ipupod.Client(server="127.0.0.1:1")
    with pytest.raises(ipupod.Error, match="unknown optimizer 'adagrad'") as caught:
        client.compile(b"onnx", train=True, optimizer="adagrad")
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ipupod.Error, match="pass train=True"):
        client.compile(b"onnx", loss="loss")
    with pytest.raises(ipupod.Error, match="pass train=True"):
        client.compile(b"onnx", param_groups=[{"params": ["fc.bias"], "lr": 0.1}])
    with pytest.raises(ipupod.Error, match=r"param_groups\[0\] is .* 'params'"):
        client.compile(b"onnx", train=True, param_groups=[{"lr": 0.1}])
    with pytest.raises(ipupod.Error, match="list of weight names"):
        client.compile(b"onnx", train=True, param_groups=[{"params": "fc.bias"}])
    with pytest.raises(ipupod.Error, match="ONNX file path"):
        client.compile(42)
    with pytest.raises(ipupod.Error, match="cannot reach ipupodd") as caught:
        client.compile(b"onnx")
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


def test_the_public_api_has_docstrings_and_type_hints():
    assert "import ipupod.poptorch as poptorch" in poptorch.__doc__
    for name in poptorch.__all__:
        assert getattr(poptorch, name).__doc__, name
    for cls in (poptorch.PoplarExecutor, poptorch.Options, poptorch.Stage,
                poptorch.optim.VariableAttributes, poptorch.optim.LAMB):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") or name in vars(torch.optim.Optimizer):
                continue
            assert member.__doc__, f"{cls.__name__}.{name}"
            signature = inspect.signature(member)
            assert signature.return_annotation is not inspect.Signature.empty, name


def test_float16_optimizer_attributes_reach_the_compiler():
    adam = poptorch.optim.Adam(TwoLayers().parameters(), lr=1e-3, loss_scaling=128.0,
                               first_order_momentum_accum_type=torch.half,
                               accum_type=torch.float)
    spec = optim.describe(adam)
    assert spec.attrs["first_order_momentum_accum_type"] == 16.0
    assert spec.attrs["loss_scaling"] == 128.0
    assert "first_order_momentum_accum_type" in spec.constants  # a type: fixed at compile
    sgd = poptorch.optim.SGD(TwoLayers().parameters(), lr=0.01, momentum=0.9,
                             velocity_scaling=64.0)
    assert optim.describe(sgd).attrs["velocity_scaling"] == 64.0
    with pytest.raises(ValueError, match="torch.half or torch.float"):
        optim.describe(poptorch.optim.Adam(TwoLayers().parameters(), accum_type=torch.int8))


def test_an_ipu_config_gives_the_options_its_run_shape_and_setters_override_it():
    config = {"device_iterations": 4, "replication_factor": 2, "gradient_accumulation_steps": 8,
              "inference_device_iterations": 6, "inference_replication_factor": 1}
    opts = poptorch.Options().ipuConfig(config)
    training, inference = opts.for_mode(True), opts.for_mode(False)
    assert (training.device_iterations, training.replication_factor,
            training.Training.gradient_accumulation) == (4, 2, 8)
    assert (inference.device_iterations, inference.replication_factor) == (6, 1)
    assert "gradient_accumulation_steps=8" in training.compile_settings(True).sets
    assert "inference_device_iterations=6" in inference.compile_settings(False).sets
    opts.deviceIterations(3)  # a setter after the config wins, in both modes
    assert opts.for_mode(False).device_iterations == 3
    assert opts.for_mode(False).replication_factor == 1
