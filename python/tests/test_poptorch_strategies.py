"""Acceptance: PopTorch's multi-IPU strategies (seed 003, sections 4.4.1 and 4.4.2: phases,
Liveness, phased and sharded execution) and the ops of 4.6 added with them
(``ctc_beam_search_decoder``, ``MultiConv``) with ``import ipupod.poptorch as poptorch`` in
place of ``import poptorch``, against a private ipupodd found through ``$IPUPOD_SERVER``, each
checked against torch on the CPU (the decoder against references written here).

Lines between ``# seed begin`` and ``# seed end`` are the seed's, unchanged; what the seed
leaves undefined (``opts``, the models its strategies name) is defined before, and the checks
come after."""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import torch.nn.functional as F  # noqa: E402 - the seed's F

import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.poptorch import export  # noqa: E402


@pytest.fixture
def server(ipupod_server, monkeypatch):
    """The private ipupodd as the front end finds it: ``$IPUPOD_SERVER``."""
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "poptorch-user")
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)
    monkeypatch.delenv("POPTORCH_WAIT_FOR_IPU", raising=False)
    return ipupod_server


def caught(call):
    with pytest.raises(poptorch.Error) as error:
        call()
    return error.value


def report_of(server, model, example, names, opts, training=False):
    """The compile report of ``model`` under ``opts`` (what the front end would compile)."""
    exported = export.export(model, example, names, training, opts.execution_strategy)
    extra = {}
    if training:
        extra = dict(train=True, loss=export.loss_name(exported), optimizer="sgd",
                     optimizer_attrs={"lr": 0.01})
    result = server.client().compile(exported.onnx, set=opts.compile_settings(training).sets,
                                     report=True, **extra)
    return result.report


def torch_sgd(model, steps, *inputs, lr=0.01):
    """torch on the CPU: the losses of ``steps`` SGD steps on a copy of ``model``, and the
    copy."""
    reference = copy.deepcopy(model)
    reference.train()
    optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = reference(*inputs)[1]
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, reference


# ---------------------------------------------------------------------- 4.4.1 Phase

class Model(torch.nn.Module):
    """The seed's Phase example (4.4.1), as it defines it."""

    def forward(self, x, y):
        with poptorch.Block("A"):
            c = x + x
        with poptorch.Block("B"):
            d = y + y
        with poptorch.Block("C"):
            e = x * 3

        return c, d, e


@pytest.mark.ipupod(pod="POD4")
def test_4_4_1_phases_of_stages_run_on_their_ipus(server):
    # seed begin (4.4.1, poptorch.Phase)
    first = poptorch.Phase(poptorch.Stage("A").ipu(0))
    # Regrouped in a single stage
    second = poptorch.Phase(poptorch.Stage("B", "C").ipu(1))
    # 2 separate stages
    second = poptorch.Phase(poptorch.Stage("B").ipu(1), poptorch.Stage("C").ipu(3))
    # seed end
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    # The two separate stages, in parallel: phase 0 on IPU 0, phase 1 on IPUs 1 and 3.
    opts = poptorch.Options()
    opts.setExecutionStrategy(poptorch.ParallelPhasedExecution(first, second))
    parallel = poptorch.inferenceModel(Model(), opts)
    for got, want in zip(parallel(x, y), Model()(x, y)):
        torch.testing.assert_close(got, want)
    summary = parallel._executable.summary
    assert summary["execution"] == "parallel_phased" and summary["phases"] == 2
    assert summary["ipus"]["per_replica"] == 4 and summary["stages"] == 3
    parallel.destroy()
    # Regrouped in a single stage, serially: phase 0 on IPU 0, phase 1 on IPU 1.
    regrouped = poptorch.Phase(poptorch.Stage("B", "C").ipu(1))
    opts = poptorch.Options().setExecutionStrategy(
        poptorch.SerialPhasedExecution(poptorch.Phase(poptorch.Stage("A").ipu(0)), regrouped))
    serial = poptorch.inferenceModel(Model(), opts)
    for got, want in zip(serial(x, y), Model()(x, y)):
        torch.testing.assert_close(got, want)
    summary = serial._executable.summary
    assert summary["execution"] == "serial_phased" and summary["stages"] == 2
    assert summary["ipus"]["per_replica"] == 2


# ---------------------------------------------------------------------- 4.4.1 f-strings

@pytest.mark.ipupod(pod="POD4")
def test_4_4_1_advanced_annotation_with_strings_trains_as_torch(server):
    torch.manual_seed(11)
    # seed begin (4.4.1, Advanced annotation with strings; `import poptorch` replaced)
    poptorch.setLogLevel("DEBUG")  # Force debug logging
    N = 3
    size = 10


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = torch.nn.ParameterList([
                torch.nn.Parameter(torch.rand(size, size), requires_grad=True)
                for n in range(N * 6)
            ])

        def forward(self, in0, target=None):
            phase = 0
            weight = iter(self.weights)
            with poptorch.Block("phase0_ipu0"):
                ins = torch.split(in0, size)
            for n in range(N * 3):
                out = []
                for ipu in range(2):
                    x = ins[ipu]
                    with poptorch.Block(f"phase{phase}_ipu{ipu}"):
                        x = torch.matmul(next(weight), x)
                        out.append(F.relu(x))
                ins = out[1], out[0]
                # We want 2 matmuls in the same phase
                if n % 3 != 1:
                    phase += 1
            with poptorch.Block(f"phase{N*2-1}_ipu1"):
                res = ins[0] + ins[1]
                if target is None:
                    return res
                return res, torch.nn.L1Loss(reduction="mean")(res, target)


    input = torch.rand(size * 2, 1)
    target = torch.rand(size, 1)
    model = Model()
    opts = poptorch.Options()
    phases = []
    # Alternate between 0-2 and 1-3
    for n in range(N):
        phases.append([
            poptorch.Stage(f"phase{2*n}_ipu0").ipu(0),
            poptorch.Stage(f"phase{2*n}_ipu1").ipu(2)
        ])
        phases.append([
            poptorch.Stage(f"phase{2*n+1}_ipu0").ipu(1),
            poptorch.Stage(f"phase{2*n+1}_ipu1").ipu(3)
        ])
    opts.setExecutionStrategy(poptorch.ParallelPhasedExecution(*phases))
    poptorch_model = poptorch.trainingModel(model, opts)
    poptorch_model.compile(input, target)
    # seed end
    poptorch.setLogLevel("WARN")
    summary = poptorch_model._executable.summary
    assert summary["execution"] == "parallel_phased" and summary["phases"] == 2 * N
    assert summary["ipus"]["reserved"] == 4 and summary["stages"] == 4 * N
    start = copy.deepcopy(model)
    losses = [float(poptorch_model(input, target)[1]) for _ in range(5)]
    want, reference = torch_sgd(start, 5, input, target)
    assert losses == pytest.approx(want, rel=1e-5, abs=1e-6)
    poptorch_model.copyWeightsToHost()
    for got, expected in zip(model.weights, reference.weights):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def phased_report(server, strategy, training=False):
    """The f-string example's model (without its debug logging) compiled with ``strategy``."""
    torch.manual_seed(12)
    model = StringsModel()
    opts = poptorch.Options().setExecutionStrategy(strategy)
    example = (torch.rand(20, 1), torch.rand(10, 1)) if training else (torch.rand(20, 1),)
    names = ["in0", "target"] if training else ["in0"]
    return report_of(server, model, example, names, opts, training)


class StringsModel(torch.nn.Module):
    """The f-string example's model (4.4.1) with N = 3, size = 10."""

    def __init__(self, size=10):
        super().__init__()
        self.size = size
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.rand(size, size)) for _ in range(18)])

    def forward(self, in0, target=None):
        phase, weight = 0, iter(self.weights)
        with poptorch.Block("phase0_ipu0"):
            ins = torch.split(in0, self.size)
        for n in range(9):
            out = []
            for ipu in range(2):
                with poptorch.Block(f"phase{phase}_ipu{ipu}"):
                    out.append(F.relu(torch.matmul(next(weight), ins[ipu])))
            ins = out[1], out[0]
            if n % 3 != 1:
                phase += 1
        with poptorch.Block("phase5_ipu1"):
            res = ins[0] + ins[1]
            if target is None:
                return res
            return res, torch.nn.L1Loss(reduction="mean")(res, target)


def strings_phases(serial=False):
    """The example's phases: parallel on IPUs 0-2 / 1-3, or serial on IPUs 0 and 1."""
    phases = []
    for n in range(6):
        ipus = (0, 1) if serial else ((0, 2) if n % 2 == 0 else (1, 3))
        phases.append([poptorch.Stage(f"phase{n}_ipu0").ipu(ipus[0]),
                       poptorch.Stage(f"phase{n}_ipu1").ipu(ipus[1])])
    return phases


@pytest.mark.ipupod(pod="POD4")
def test_liveness_trades_memory_for_streaming_time(server):
    plans = {}
    for liveness in poptorch.Liveness:
        strategy = poptorch.SerialPhasedExecution(*strings_phases(serial=True))
        plans[liveness] = phased_report(server, strategy.setTensorsLiveness(liveness), True)
    live = plans[poptorch.Liveness.AlwaysLive]
    assert live["liveness"] == "always_live" and len(live["phases"]) == 6
    # Always live: each IPU holds the 9 weights (400 bytes each) of its 6 phases (and IPU 0
    # the split's sizes), nothing moves.
    assert 9 * 400 <= live["ipus"][0]["weight_bytes"] < 10 * 400
    assert all(p["streaming_bytes_per_micro_batch"] == 0 for p in live["phases"])
    for liveness in list(poptorch.Liveness)[1:]:
        off = plans[liveness]
        ipu = off["ipus"][0]
        # One phase at a time: its largest, 2 weights (and, overlapped, the next phase's
        # weight loading meanwhile).
        held = 3 if liveness == poptorch.Liveness.OffChipAfterFwd else 2
        assert held * 400 <= ipu["weight_bytes"] < (held + 1) * 400
        assert ipu["streaming_memory_bytes"] > 0
        assert ipu["total_bytes"] < live["ipus"][0]["total_bytes"]
        assert all(p["streaming_bytes_per_micro_batch"] > 0 for p in off["phases"])
        assert off["step_s"] > live["step_s"]
    no_overlap = plans[poptorch.Liveness.OffChipAfterFwdNoOverlap]
    assert no_overlap["step_s"] > plans[poptorch.Liveness.OffChipAfterFwd]["step_s"]
    each = plans[poptorch.Liveness.OffChipAfterEachPhase]
    # Values passed between phases go through streaming memory too, not over IPU-Link.
    assert sum(p["streaming_bytes_per_micro_batch"] for p in each["phases"]) > \
        sum(p["streaming_bytes_per_micro_batch"] for p in no_overlap["phases"])
    assert sum(p["ipu_link_s"] for p in each["phases"]) < \
        sum(p["ipu_link_s"] for p in no_overlap["phases"])
    assert each["step_s"] >= no_overlap["step_s"]
    # The parallel strategy can send tensors off chip after the forward pass only.
    parallel = poptorch.ParallelPhasedExecution(*strings_phases()).sendTensorsOffChipAfterFwd()
    assert phased_report(server, parallel, True)["liveness"] == "off_chip_after_fwd"


@pytest.mark.ipupod(pod="POD4")
def test_off_chip_liveness_trains_as_torch(server):
    torch.manual_seed(13)
    model = StringsModel()
    start = copy.deepcopy(model)
    strategy = poptorch.SerialPhasedExecution(*strings_phases(serial=True))
    strategy.setTensorsLiveness(poptorch.Liveness.OffChipAfterEachPhase)
    opts = poptorch.Options().setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(2)
    training = poptorch.trainingModel(model, opts)
    x, target = torch.rand(40, 1), torch.rand(20, 1)
    loss = training(x, target)[1]
    # gradientAccumulation 2: one update on the mean of the two micro-batches' gradients;
    # the loss returned is the last micro-batch's (OutputMode.Final).
    reference = copy.deepcopy(start)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    losses = [reference(x[i * 20:(i + 1) * 20], target[i * 10:(i + 1) * 10])[1]
              for i in range(2)]
    (sum(losses) / 2).backward()
    optimizer.step()
    assert float(loss) == pytest.approx(float(losses[1]), rel=1e-5)
    training.copyWeightsToHost()
    for got, want in zip(model.weights, reference.weights):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- 4.4.2 phased

class Towers(torch.nn.Module):
    """Two towers side by side (blocks A, B, C on the left, A2, B2, C2 on the right), each
    phase one layer of each; a loss when given a target."""

    def __init__(self):
        super().__init__()
        self.left = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(3))
        self.right = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(3))

    def forward(self, x, target=None):
        a, b = x, x.flip(-1)
        for i, name in enumerate("ABC"):
            with poptorch.Block(name):
                a = torch.tanh(self.left[i](a))
            with poptorch.Block(f"{name}2"):
                b = torch.tanh(self.right[i](b)) + (a if i == 2 else 0)
        if target is None:
            return b
        return b, torch.nn.functional.mse_loss(b, target)


@pytest.mark.ipupod(pod="POD4")
def test_4_4_2_serial_phased_execution_runs_and_trains_as_torch(server):
    torch.manual_seed(21)
    opts = poptorch.Options()
    # seed begin (4.4.2, Serial phased execution)
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("A"), poptorch.Stage("A2")),
        poptorch.Phase(poptorch.Stage("B"), poptorch.Stage("B2")),
        poptorch.Phase(poptorch.Stage("C"), poptorch.Stage("C2")))

    strategy.phase(0).ipus(0, 1)
    strategy.phase(1).ipus(0, 1)
    strategy.phase(2).ipus(0, 1)

    opts.setExecutionStrategy(strategy)
    # seed end
    model = Towers()
    x, target = torch.randn(4, 6), torch.randn(4, 6)
    inference = poptorch.inferenceModel(model, opts)
    torch.testing.assert_close(inference(x), model(x), rtol=1e-5, atol=1e-6)
    summary = inference._executable.summary
    assert summary["execution"] == "serial_phased" and summary["phases"] == 3
    assert summary["ipus"]["per_replica"] == 2 and summary["stages"] == 6
    inference.destroy()
    start = copy.deepcopy(model)
    training = poptorch.trainingModel(model, opts)
    losses = [float(training(x, target)[1]) for _ in range(3)]
    want, reference = torch_sgd(start, 3, x, target)
    assert losses == pytest.approx(want, rel=1e-5)
    training.copyWeightsToHost()
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


class Six(torch.nn.Module):
    """Six blocks "0" to "5" (Block.useAutoId), two per phase side by side."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(6))

    def forward(self, x):
        poptorch.Block.useAutoId()
        left, right = x, -x
        for p in range(3):
            with poptorch.Block():
                left = torch.relu(self.layers[2 * p](left))
            with poptorch.Block():
                right = torch.relu(self.layers[2 * p + 1](right + left))
        return left + right


@pytest.mark.ipupod(pod="POD4")
def test_4_4_2_parallel_phased_execution_alternates_ipu_groups(server):
    torch.manual_seed(22)
    opts = poptorch.Options()
    # seed begin (4.4.2, Parallel phased execution)
    strategy = poptorch.ParallelPhasedExecution(
        poptorch.Phase(poptorch.Stage("0"), poptorch.Stage("1")),
        poptorch.Phase(poptorch.Stage("2"), poptorch.Stage("3")),
        poptorch.Phase(poptorch.Stage("4"), poptorch.Stage("5")))

    strategy.phase(0).ipus(0, 2)
    strategy.phase(1).ipus(1, 3)
    strategy.phase(2).ipus(0, 2)

    opts.setExecutionStrategy(strategy)
    # seed end
    model = Six()
    x = torch.randn(8, 4)
    poptorch_model = poptorch.inferenceModel(model, opts)
    torch.testing.assert_close(poptorch_model(x), model(x), rtol=1e-5, atol=1e-6)
    summary = poptorch_model._executable.summary
    assert summary["execution"] == "parallel_phased" and summary["phases"] == 3
    assert summary["ipus"]["reserved"] == 4 and summary["liveness"] == "always_live"
    report = report_of(server, model, (x,), ["x"], opts)
    assert [p["ipus"] for p in report["phases"]] == [[0, 2], [1, 3], [0, 2]]
    # A step: the three phases one after another, each its slower IPU, plus host transfers.
    per_micro_batch = sum(p["time_s"] for p in report["phases"]) + \
        sum(ipu["host_s"] for ipu in report["ipus"])
    assert report["step_s"] == pytest.approx(per_micro_batch)


@pytest.mark.ipupod(pod="POD4")
def test_phased_strategies_as_poptorch_builds_them(server):
    # PopTorch's own forms: block ids as phases, and stage(block_id).ipu(n).
    torch.manual_seed(23)
    model = Towers()
    strategy = poptorch.SerialPhasedExecution(["A", "A2"], ["B", "B2"], ["C", "C2"])
    for block in ("A", "A2", "B", "B2", "C", "C2"):
        strategy.stage(block).ipu(0)
    strategy.setTensorsLiveness(poptorch.Liveness.OffChipAfterFwd).useSeparateBackwardPhase()
    x = torch.randn(2, 6)
    opts = poptorch.Options().setExecutionStrategy(strategy)
    poptorch_model = poptorch.inferenceModel(model, opts)
    torch.testing.assert_close(poptorch_model(x), model(x), rtol=1e-5, atol=1e-6)
    summary = poptorch_model._executable.summary
    assert summary["ipus"]["per_replica"] == 1 and summary["phases"] == 3
    assert summary["liveness"] == "off_chip_after_fwd"


def test_phased_strategies_reject_what_poptorch_rejects():
    stages = poptorch.Phase(poptorch.Stage("A"), poptorch.Stage("B"))
    error = caught(lambda: stages.ipus(0, 1, 2))  # IPU counts that disagree
    assert error.code.name == "INVALID_ARGUMENT" and isinstance(error, ValueError)
    assert "Phase contains 2 stages but you provided 3 IPUs" in error.message
    error = caught(poptorch.SerialPhasedExecution)
    assert error.code.name == "INVALID_ARGUMENT" and "no AutoStage" in error.message
    error = caught(lambda: poptorch.ParallelPhasedExecution(poptorch.AutoStage.AutoIncrement))
    assert error.code.name == "INVALID_ARGUMENT" and "no AutoStage" in error.message
    error = caught(lambda: poptorch.SerialPhasedExecution(["A"], [poptorch.Stage("A")]))
    assert "block 'A' is associated with more than one stage" in error.message
    error = caught(lambda: poptorch.Phase("A", poptorch.Stage("B")))
    assert "must either be block IDs or Stages" in error.message
    strategy = poptorch.SerialPhasedExecution("A", "B")
    assert caught(lambda: strategy.phase(2)).code.name == "INVALID_ARGUMENT"
    assert caught(lambda: strategy.stage("Z")).code.name == "INVALID_ARGUMENT"
    error = caught(lambda: strategy.setTensorsLiveness("OffChipAfterFwd"))
    assert "takes a poptorch.Liveness" in error.message


@pytest.mark.ipupod(pod="POD4")
def test_phases_that_do_not_match_the_model_are_compile_errors(server):
    x = torch.randn(2, 6)
    # A block no stage names (stage ids that do not match the phases).
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("A").ipu(0), poptorch.Stage("A2").ipu(1)),
        poptorch.Phase(poptorch.Stage("B").ipu(0), poptorch.Stage("B2").ipu(1)))
    opts = poptorch.Options().setExecutionStrategy(strategy)
    error = caught(lambda: poptorch.inferenceModel(Towers(), opts)(x))
    assert error.code.name == "INVALID_ARGUMENT"
    assert "Unknown block 'C'" in error.message and "add it to a Stage" in error.message
    # A stage without an IPU.
    strategy = poptorch.SerialPhasedExecution(["A", "A2"], ["B", "B2"], ["C", "C2"])
    opts = poptorch.Options().setExecutionStrategy(strategy)
    error = caught(lambda: poptorch.inferenceModel(Towers(), opts)(x))
    assert error.code.name == "INVALID_ARGUMENT" and "has no IPU" in error.message
    # Parallel phases on IPUs of the wrong parity: the compiler refuses, as PopTorch does.
    strategy = poptorch.ParallelPhasedExecution(["A", "A2"], ["B", "B2"], ["C", "C2"])
    for phase in range(3):
        strategy.phase(phase).ipus(0)
    opts = poptorch.Options().setExecutionStrategy(strategy)
    error = caught(lambda: poptorch.inferenceModel(Towers(), opts)(x))
    assert error.code.name == "INVALID_ARGUMENT"
    assert "even phases must run on even IPUs and odd phases on odd IPUs" in error.message
    # A phased strategy for a model without blocks.
    opts = poptorch.Options().setExecutionStrategy(poptorch.SerialPhasedExecution("A"))
    error = caught(lambda: poptorch.inferenceModel(torch.nn.Linear(6, 6), opts)(x))
    assert error.code.name == "INVALID_ARGUMENT" and "the model has none" in error.message


# ---------------------------------------------------------------------- sharded training

class TwoShards(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(2))

    def forward(self, x, target):
        for ipu, layer in enumerate(self.layers):
            with poptorch.Block(ipu_id=ipu):
                x = torch.tanh(layer(x))
        return x, torch.nn.functional.mse_loss(x, target)


@pytest.mark.ipupod(pod="POD4")
def test_sharded_training_runs_the_shards_in_turn_and_trains_as_torch(server):
    torch.manual_seed(24)
    model = TwoShards()
    start = copy.deepcopy(model)
    opts = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    opts.deviceIterations(2)  # no gradientAccumulation >= stages rule, unlike pipelining
    training = poptorch.trainingModel(model, opts)
    x, target = torch.randn(8, 6), torch.randn(8, 6)
    losses = []
    for _ in range(2):
        training(x, target)
        losses.append(float(training(x, target)[1]))
    summary = training._executable.summary
    assert summary["execution"] == "sharded" and summary["mode"] == "training"
    assert summary["ipus"]["per_replica"] == 2
    # Eight torch steps: two per call of two device iterations, x2 calls x2.
    reference = copy.deepcopy(start)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    for _ in range(4):
        for i in range(2):
            optimizer.zero_grad()
            loss = reference(x[4 * i:4 * i + 4], target[4 * i:4 * i + 4])[1]
            loss.backward()
            optimizer.step()
    training.copyWeightsToHost()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert losses[-1] == pytest.approx(float(loss), rel=1e-5)
    report = report_of(server, start, (x[:4], target[:4]), ["x", "target"], opts, True)
    assert report["execution"] == "sharded" and report["mode"] == "training"
    # Forward then backward through the shards, one IPU at a time, no pipeline.
    busy = sum(i["compute_s"] + i["ipu_link_s"] + i["host_s"] for i in report["ipus"])
    update = max(i["update_ipu_link_s"] + i["update_host_s"] for i in report["ipus"])
    assert report["step_s"] == pytest.approx(2 * (busy + update))
    assert all(i["micro_batches_in_flight"] == 1 for i in report["ipus"])


# ---------------------------------------------------------------------- 4.6.1 ctc decoder

def exact_ctc(log_probs, length, blank, top_paths):
    """The reference: every alignment of the first ``length`` steps enumerated, collapsed
    (repeats merged, blanks dropped) and its probability added to its labelling's; the best
    ``top_paths`` labellings (ties to the smaller labelling). A beam wider than the number of
    labellings finds exactly these."""
    import itertools
    import math
    classes = log_probs.shape[-1]
    totals = {}
    for alignment in itertools.product(range(classes), repeat=length):
        labels, previous = [], None
        for c in alignment:
            if c != blank and c != previous:
                labels.append(c)
            previous = c
        p = math.exp(sum(float(log_probs[t, c]) for t, c in enumerate(alignment)))
        totals[tuple(labels)] = totals.get(tuple(labels), 0.0) + p
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:top_paths]
    return [(labels, math.log(p)) for labels, p in ranked]


class Decoder(torch.nn.Module):
    """The seed's model (4.6.1), as it defines it."""

    def forward(self, log_probs, lengths):
        return poptorch.ctc_beam_search_decoder(log_probs, lengths)


class TopThree(torch.nn.Module):
    def forward(self, log_probs, lengths):
        return poptorch.ctc_beam_search_decoder(log_probs, lengths, blank=2, beam_width=50,
                                                top_paths=3)


@pytest.mark.ipupod(pod="POD4")
def test_4_6_1_ctc_beam_search_decoder_finds_the_most_probable_labellings(server):
    torch.manual_seed(31)
    time, batch, classes = 4, 3, 3
    log_probs = torch.randn(time, batch, classes).log_softmax(-1)
    lengths = torch.tensor([4, 2, 3], dtype=torch.int)
    # seed begin (4.6.1)
    class Model(torch.nn.Module):
        def forward(self, log_probs, lengths):
            return poptorch.ctc_beam_search_decoder(log_probs, lengths)
    # seed end
    for model, blank, top in ((Model(), 0, 1), (TopThree(), 2, 3)):
        probs, path_lengths, paths = poptorch.inferenceModel(model)(log_probs, lengths)
        assert probs.shape == (batch, top) and probs.dtype == torch.float32
        assert path_lengths.shape == (batch, top) and path_lengths.dtype == torch.int32
        assert paths.shape == (batch, top, time) and paths.dtype == torch.int32
        for b in range(batch):
            want = exact_ctc(log_probs[:, b], int(lengths[b]), blank, top)
            for p, (labels, log_prob) in enumerate(want):
                assert int(path_lengths[b, p]) == len(labels)
                assert paths[b, p].tolist() == list(labels) + [0] * (time - len(labels))
                assert float(probs[b, p]) == pytest.approx(log_prob, rel=1e-5, abs=1e-6)
        # On the CPU the front end decodes the same way.
        for got, cpu in zip((probs, path_lengths, paths), model(log_probs, lengths)):
            torch.testing.assert_close(got, cpu)


def reference_beam_search(log_probs, length, blank, beam_width):
    """A CTC prefix beam search written for this test (probabilities, not logs): per prefix
    the probability of alignments ending in blank and in its last label."""
    probs = log_probs.double().exp()
    beams = {(): (1.0, 0.0)}
    for t in range(length):
        nxt = {}
        for prefix, (pb, pl) in beams.items():
            b0, l0 = nxt.get(prefix, (0.0, 0.0))
            nxt[prefix] = (b0 + (pb + pl) * float(probs[t, blank]), l0)
            for c in range(probs.shape[-1]):
                if c == blank:
                    continue
                q = float(probs[t, c])
                longer = prefix + (c,)
                b1, l1 = nxt.get(longer, (0.0, 0.0))
                if prefix and prefix[-1] == c:
                    nxt[longer] = (b1, l1 + pb * q)
                    b0, l0 = nxt[prefix]
                    nxt[prefix] = (b0, l0 + pl * q)
                else:
                    nxt[longer] = (b1, l1 + (pb + pl) * q)
        beams = dict(sorted(nxt.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:beam_width])
    return max(beams.items(), key=lambda kv: (sum(kv[1]), [-c for c in kv[0]]))


@pytest.mark.ipupod(pod="POD4")
def test_ctc_beam_search_decoder_prunes_as_a_beam_search(server):
    # PopTorch's own test's sizes: 9 steps, 3 sequences, 10 classes, beam 100 and beam 2.
    torch.manual_seed(42)
    log_probs = torch.randn(9, 3, 10)
    lengths = torch.randint(5, 9, (3,), dtype=torch.int)

    class Narrow(torch.nn.Module):
        def forward(self, log_probs, lengths):
            return poptorch.ctc_beam_search_decoder(log_probs, lengths, beam_width=2)

    for model, width in ((Decoder(), 100), (Narrow(), 2)):
        probs, path_lengths, paths = poptorch.inferenceModel(model)(log_probs, lengths)
        for b in range(3):
            labels, (pb, pl) = reference_beam_search(log_probs[:, b], int(lengths[b]), 0, width)
            assert paths[b, 0, :len(labels)].tolist() == list(labels)
            assert int(path_lengths[b, 0]) == len(labels)
            assert float(probs[b, 0]) == pytest.approx(math_log(pb + pl), rel=1e-5)


def math_log(x):
    import math
    return math.log(x)


class DecodedLoss(torch.nn.Module):
    """Log probabilities from a linear layer, decoded; ``through`` puts the decoder's
    probabilities into the loss."""

    def __init__(self, through):
        super().__init__()
        self.fc = torch.nn.Linear(4, 5)
        self.through = through

    def forward(self, x, lengths, target):
        log_probs = self.fc(x).log_softmax(-1)
        probs, path_lengths, paths = poptorch.ctc_beam_search_decoder(log_probs, lengths)
        loss = torch.nn.functional.mse_loss(log_probs, target)
        if self.through:
            loss = loss + probs.mean()
        return paths, loss


@pytest.mark.ipupod(pod="POD4")
def test_ctc_beam_search_decoder_is_inference_only(server):
    torch.manual_seed(33)
    x, target = torch.randn(6, 2, 4), torch.randn(6, 2, 5)
    lengths = torch.tensor([6, 3], dtype=torch.int)
    # Beside the loss it decodes in a training model too...
    model = DecodedLoss(through=False)
    training = poptorch.trainingModel(model)
    paths, _ = training(x, lengths, target)
    assert paths.shape == (2, 1, 6)
    training.destroy()
    # ... but the loss cannot go through it: it has no gradient, as in PopTorch.
    error = caught(lambda: poptorch.trainingModel(DecodedLoss(through=True))(x, lengths, target))
    assert error.code.name == "INVALID_ARGUMENT"
    assert "is inference only" in error.message and "CtcBeamSearchDecoder" in error.message


def test_ctc_beam_search_decoder_checks_its_arguments():
    log_probs, lengths = torch.randn(3, 2, 4), torch.tensor([3, 1], dtype=torch.int)
    error = caught(lambda: poptorch.ctc_beam_search_decoder(log_probs.tolist(), lengths))
    assert "probs must be a torch.tensor" in error.message
    with pytest.raises(ValueError, match="top_paths <= beam_width"):
        poptorch.ctc_beam_search_decoder(log_probs, lengths, beam_width=2, top_paths=3)
    with pytest.raises(ValueError, match="blank class 4 is not one of the 4 classes"):
        poptorch.ctc_beam_search_decoder(log_probs, lengths, blank=4)
    with pytest.raises(ValueError, match="length 4 of sequence 0 is outside"):
        poptorch.ctc_beam_search_decoder(log_probs, torch.tensor([4, 1]))
    assert "ctc_beam_search_decoder" not in poptorch._NOT_MODELLED


# ---------------------------------------------------------------------- 4.6.4 MultiConv

class TwoConvs(torch.nn.Module):
    """PopTorch's MultiConv example: two data-independent convolutions in one
    multi-convolution (``multiconv`` None: called one after another)."""

    def __init__(self, multiconv=None):
        super().__init__()
        self.convA = torch.nn.Conv2d(16, 16, 3)
        self.convB = torch.nn.Conv2d(16, 16, 3, bias=False)
        self.multiconv = multiconv

    def forward(self, x, u):
        if self.multiconv is None:
            return self.convA(x) - self.convB(u)
        with self.multiconv:
            y = self.convA(x)
            v = self.convB(u)
        return y - v


@pytest.mark.ipupod(pod="POD4")
def test_4_6_4_multiconv_runs_the_convolutions_and_caps_their_memory(server):
    torch.manual_seed(41)
    x, u = torch.randn(2, 16, 64, 64), torch.randn(2, 16, 64, 64)
    multiconv = (poptorch.MultiConv().availableMemoryProportions((0.0, 0.6))
                 .partialsTypes([torch.float, torch.half])
                 .planType(poptorch.MultiConvPlanType.Parallel)
                 .perConvReservedTiles(100).cycleBackOff(0.3).enableConvDithering(True))
    model = TwoConvs(multiconv)
    out = poptorch.inferenceModel(model)(x, u)
    torch.testing.assert_close(out, model(x, u), rtol=1e-4, atol=1e-4)  # the separate convs
    opts = poptorch.Options()
    plain = report_of(server, TwoConvs(), (x, u), ["x", "u"], opts)["ipus"][0]
    capped = report_of(server, model, (x, u), ["x", "u"], opts)["ipus"][0]
    # convA (2 x 62 x 62 windows of 16 x 3 x 3 floats, 4.4 MB) in passes of one tile's memory.
    assert plain["serial_passes_per_micro_batch"] == 0
    assert capped["serial_passes_per_micro_batch"] > 0
    assert capped["temporary_bytes"] == plain["temporary_bytes"]  # convB's, uncapped
    # One proportion for every convolution: both are capped.
    both = report_of(server, TwoConvs(poptorch.MultiConv().availableMemoryProportions(0.0)),
                     (x, u), ["x", "u"], opts)["ipus"][0]
    assert both["serial_passes_per_micro_batch"] == 2 * capped["serial_passes_per_micro_batch"]
    assert both["temporary_bytes"] < plain["temporary_bytes"]


def test_multiconv_rejects_what_poptorch_rejects():
    mc = poptorch.MultiConv()
    with pytest.raises(ValueError, match="Invalid partials types"):
        mc.partialsTypes("half")
    with pytest.raises(poptorch.Error, match="Invalid plan type"):
        mc.planType("parallel")
    with pytest.raises(poptorch.Error, match="Invalid available memory proportion"):
        mc.availableMemoryProportions([0.5, "0.2"])
    with pytest.raises(poptorch.Error, match="between 0 and 1"):
        mc.availableMemoryProportions(1.5)
    with pytest.raises(ValueError, match="value must be bool or list of bools"):
        mc.enableConvDithering("yes")
    x = torch.randn(1, 16, 8, 8)

    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(16, 4, 3)

        def forward(self, x):
            with poptorch.MultiConv():
                with poptorch.MultiConv():
                    return self.conv(x)

    error = caught(lambda: export.export(Nested(), (x,), ["x"], False,
                                         poptorch.PipelinedExecution()))
    assert error.code.name == "INVALID_ARGUMENT"
    assert "Nested poptorch.MultiConv is not supported" in error.message

    class Empty(torch.nn.Module):
        def forward(self, x):
            with poptorch.MultiConv():
                return torch.pow(x, 2)

    error = caught(lambda: export.export(Empty(), (x,), ["x"], False,
                                         poptorch.PipelinedExecution()))
    assert "Unexpected end_multi_conv" in error.message
    three = TwoConvs(poptorch.MultiConv().availableMemoryProportions([0.1, 0.2, 0.3]))
    error = caught(lambda: export.export(three, (x, x), ["x", "u"], False,
                                         poptorch.PipelinedExecution()))
    assert "MultiConv has 2 convolutions but 3 available memory proportions" in error.message
    # On the CPU it changes nothing.
    torch.testing.assert_close(Nested()(x).shape, torch.Size([1, 4, 6, 6]))
