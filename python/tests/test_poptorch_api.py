"""PopTorch's API around the features chapter (seed 003): every ``Options`` setter takes
effect, is accepted with a documented reason or raises ``poptorch.Error``; PopTorch's names
ipupod does not model raise ``poptorch.Error``, not AttributeError; the logger, the enums,
the hardware queries, the executor's counters; compile warnings reach the script as
``PoptorchWarning``; the client-side executable cache. Unit tests first, then tests through
a private ipupodd (``$IPUPOD_SERVER``), checked against torch."""

import copy
import logging
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ipupod  # noqa: E402
import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.poptorch import _cache  # noqa: E402


@pytest.fixture
def no_server(monkeypatch):
    monkeypatch.setenv("IPUPOD_SERVER", "127.0.0.1:1")  # nothing listens on port 1
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x, target=None):
        y = self.fc(x)
        if target is None:
            return y
        return y, torch.nn.functional.mse_loss(y, target)


def caught(call):
    """The poptorch.Error ``call`` raises (asserting it raises one)."""
    with pytest.raises(poptorch.Error) as info:
        call()
    return info.value


# ---------------------------------------------------------------------- options

CHAPTER_SETTERS = [
    "deviceIterations", "replicationFactor", "inputReplicaGrouping", "outputMode",
    "autoRoundNumIPUs", "setExecutionStrategy", "setAvailableMemoryProportion",
    "enableExecutableCaching", "useIpuModel", "useOfflineIpuTarget", "enableSyntheticData",
    "randomSeed", "loadFromFile", "broadcastBuffers", "logDir", "logCycleCount",
    "connectionType", "syncPattern", "useIpuId", "enableStableNorm", "maxRepeatLogs",
    "modelName", "showCompilationProgressBar", "relaxOptimizerAttributesChecks",
    "sourceLocationExcludes", "appendToLocationExcludes", "disableModuleNamescope",
    "defaultOutputMode", "from_json"]


def test_every_setter_of_poptorch_options_exists():
    opts = poptorch.Options()
    for name in CHAPTER_SETTERS:
        assert callable(getattr(opts, name)), name
    for group, names in [
            ("Training", ["gradientAccumulation", "setAutomaticLossScaling",
                          "accumulationAndReplicationReductionType",
                          "setMeanAccumulationAndReplicationReductionStrategy",
                          "setConvolutionDithering"]),
            ("Precision", ["setPartialsType", "enableFloatingPointExceptions",
                           "enableStochasticRounding", "halfFloatCasting",
                           "runningStatisticsAlwaysFloat"]),
            ("TensorLocations", ["setActivationLocation", "setWeightLocation",
                                 "setOptimizerLocation", "setAccumulatorLocation",
                                 "numIOTiles"]),
            ("Distributed", ["disable", "setEnvVarNames", "configureProcessId"]),
            ("Jit", ["traceModel"])]:
        for name in names:
            assert callable(getattr(getattr(opts, group), name)), f"{group}.{name}"
    settings = poptorch.TensorLocationSettings()
    for name in ["useOnChipStorage", "useReplicatedTensorSharding", "minElementsForOffChip",
                 "minElementsForReplicatedTensorSharding", "useIOTilesToLoad",
                 "useIOTilesToStore"]:
        assert getattr(settings, name)() is settings if name.startswith("use") else True


def test_accepted_setters_chain_and_change_no_compile_setting():
    plain = poptorch.Options().compile_settings(True).sets
    opts = poptorch.Options()
    assert opts.useIpuModel(True).logDir("/tmp").maxRepeatLogs(None).modelName("m") is opts
    assert opts.syncPattern(poptorch.SyncPattern.ReplicaAndLadder) is opts
    assert opts.connectionType(poptorch.ConnectionType.OnDemand) is opts
    assert opts.enableStableNorm(False).enableStableNorm(True) is opts
    assert opts.enableSyntheticData(False).broadcastBuffers(True).logCycleCount(True) is opts
    assert opts.showCompilationProgressBar(False).relaxOptimizerAttributesChecks() is opts
    assert opts.sourceLocationExcludes(["x"]).appendToLocationExcludes("y") is opts
    assert opts.disableModuleNamescope() is opts
    opts.Precision.enableStochasticRounding(False).enableFloatingPointExceptions(False)
    opts.Training.setMeanAccumulationAndReplicationReductionStrategy(
        poptorch.MeanReductionStrategy.Running).setConvolutionDithering(True)
    opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Mean)
    assert opts.compile_settings(True).sets == plain
    assert opts.defaultOutputMode()
    assert not opts.outputMode(poptorch.OutputMode.All).defaultOutputMode()


def test_optimizer_location_is_the_ipu_configs_optimizer_state_keys():
    opts = poptorch.Options().replicationFactor(2)
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False)
        .useReplicatedTensorSharding(True))
    assert opts.compile_settings(True).sets[-2:] == [
        "optimizer_state_offchip=true", "replicated_tensor_sharding=true"]
    assert "optimizer_state_offchip=true" not in opts.compile_settings(False).sets
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(True))
    assert "optimizer_state_offchip=false" in opts.compile_settings(True).sets
    opts.TensorLocations.setActivationLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(True))
    opts.TensorLocations.setWeightLocation(poptorch.TensorLocationSettings())
    opts.TensorLocations.setAccumulatorLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(True))


def test_tensor_locations_ipupod_cannot_honour_raise_or_warn():
    opts = poptorch.Options()
    off = poptorch.TensorLocationSettings().useOnChipStorage(False)
    sharded = poptorch.TensorLocationSettings().useReplicatedTensorSharding(True)
    for method in ["setActivationLocation", "setWeightLocation", "setAccumulatorLocation"]:
        error = caught(lambda: getattr(opts.TensorLocations, method)(off))
        assert isinstance(error, ValueError) and error.code.name == "UNIMPLEMENTED"
        assert "setOptimizerLocation" in error.message
        assert "setOptimizerLocation" in caught(
            lambda: getattr(opts.TensorLocations, method)(sharded)).message
    with pytest.warns(poptorch.PoptorchWarning, match="minElementsForOffChip.*without effect"):
        opts.TensorLocations.setOptimizerLocation(
            poptorch.TensorLocationSettings().minElementsForOffChip(64))
    with pytest.warns(poptorch.PoptorchWarning, match="IO tiles"):
        opts.TensorLocations.numIOTiles(32)
    assert "even number" in caught(lambda: opts.TensorLocations.numIOTiles(33)).message
    assert "TensorLocationSettings" in caught(
        lambda: opts.TensorLocations.setOptimizerLocation({"onChip": 0})).message


def test_sum_reduction_raises_and_says_how_to_sum():
    training = poptorch.Options().Training
    error = caught(lambda: training.accumulationAndReplicationReductionType(
        poptorch.ReductionType.Sum))
    assert "always averages" in error.message and "multiply the loss" in error.message
    assert error.code.name == "UNIMPLEMENTED"
    caught(lambda: training.accumulationAndReplicationReductionType(
        poptorch.ReductionType.NoReduction))
    assert training.reduction_type == poptorch.ReductionType.Mean


def test_precision_options(caplog):
    precision = poptorch.Options().Precision
    assert "nearest even" in caught(lambda: precision.enableStochasticRounding(True)).message
    assert "torch.isfinite" in caught(
        lambda: precision.enableFloatingPointExceptions(True)).message
    caught(lambda: precision.enableStochasticRounding("yes"))
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.HalfUpcastToFloat)
        precision.runningStatisticsAlwaysFloat(False)
    assert sum("[Deprecated]" in r.getMessage() for r in caplog.records) == 2


def test_jit_trace_model_as_poptorch():
    jit = poptorch.Options().Jit
    assert jit.traceModel(False) is jit
    assert "no longer supported" in caught(lambda: jit.traceModel(True)).message


def test_distributed_options_read_the_environment_and_refuse_several_processes(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    opts = poptorch.Options()
    assert (opts.Distributed.numProcesses, opts.Distributed.processId) == (4, 3)
    error = caught(lambda: opts.compile_settings(True))
    assert "4 processes" in error.message and "replicationFactor" in error.message
    opts.Distributed.disable()
    assert (opts.Distributed.numProcesses, opts.Distributed.processId) == (1, 0)
    opts.compile_settings(True)
    monkeypatch.setenv("MY_SIZE", "2")
    monkeypatch.setenv("MY_RANK", "1")
    assert opts.Distributed.setEnvVarNames("MY_SIZE", "MY_RANK").processId == 1
    assert opts.Distributed.configureProcessId(0, 1).numProcesses == 1
    caught(lambda: opts.Distributed.configureProcessId(2, 2))


def test_input_replica_grouping_validates_as_poptorch():
    opts = poptorch.Options().replicationFactor(4)
    caught(lambda: opts.inputReplicaGrouping(2, poptorch.CommGroupType.All))
    caught(lambda: opts.inputReplicaGrouping(3, poptorch.CommGroupType.Consecutive))
    opts.inputReplicaGrouping(2, poptorch.enums.CommGroupType.Orthogonal)
    assert (opts.input_group_size, opts.input_group_type) == (
        2, poptorch.CommGroupType.Orthogonal)
    opts.inputReplicaGrouping(4, poptorch.CommGroupType.NoGrouping)
    assert opts.input_group_size == 1
    opts.inputReplicaGrouping(4, poptorch.CommGroupType.Consecutive)
    opts.replicationFactor(2)
    assert "must divide" in caught(lambda: opts.compile_settings(False)).message


def test_device_and_target_options():
    opts = poptorch.Options()
    assert "Mk2" in caught(lambda: opts.useOfflineIpuTarget(1)).message
    opts.useOfflineIpuTarget(2)
    assert opts.offline_target
    caught(lambda: opts.useIpuId(-1))
    assert opts.useIpuId(16).ipu_id == 16
    caught(lambda: opts.connectionType("Never"))
    caught(lambda: opts.syncPattern(1))
    assert opts.enableSyntheticData(True).synthetic_data


def test_poptorch_option_methods_ipupod_lacks_raise_poptorch_error():
    opts = poptorch.Options()
    for name, hint in [("anchorTensor", "return the tensor"), ("enableProfiling", "report"),
                       ("updatableNamedBuffers", "copyWeightsToDevice"), ("_Popart", "ipuConfig")]:
        error = caught(lambda: getattr(opts, name))
        assert hint in error.message, name
    with pytest.raises(AttributeError):
        opts.noSuchOption  # not PopTorch's either
    opts.clone()  # copying still works with __getattr__


def test_options_from_json_and_config_files_reach_the_new_groups(tmp_path):
    opts = poptorch.Options().from_json(
        '{"deviceIterations": 3, "Precision.enableStochasticRounding": false, '
        '"Training.setMeanAccumulationAndReplicationReductionStrategy": '
        '"MeanReductionStrategy.Post", "connectionType": "ConnectionType.OnDemand"}')
    assert opts.device_iterations == 3
    assert opts.Training.mean_reduction_strategy == poptorch.MeanReductionStrategy.Post
    assert opts.connection_type == poptorch.ConnectionType.OnDemand
    path = tmp_path / "poptorch.conf"
    path.write_text("Distributed.configureProcessId(0, 1)\nJit.traceModel(False)\n"
                    "TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings()"
                    ".useOnChipStorage(False))\n")
    assert poptorch.Options().loadFromFile(str(path)).TensorLocations.optimizer_offchip
    path.write_text("Training.accumulationAndReplicationReductionType("
                    "poptorch.ReductionType.Sum)\n")
    with pytest.raises(poptorch.ConfigFileError, match="poptorch.conf:1.*always averages"):
        poptorch.Options().loadFromFile(str(path))


def test_poptorch_cache_dir_enables_caching(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(tmp_path))
    assert poptorch.Options().executable_cache_dir == str(tmp_path)
    assert poptorch.Options().enableExecutableCaching(None).executable_cache_dir == ""


# ---------------------------------------------------------------------- module names

def test_poptorch_names_ipupod_lacks_raise_poptorch_error_not_attribute_error():
    for name in ["for_loop", "cond", "set_overlap_for_input", "CPU",
                 "ICustomArgParser", "profiling", "NameScope"]:
        if name in vars(poptorch):  # provided since
            continue
        error = caught(lambda: getattr(poptorch, name))
        assert error.code.name == "UNIMPLEMENTED" and f"poptorch.{name}" in error.message
        assert isinstance(error, AttributeError)  # so hasattr still answers False
        assert not hasattr(poptorch, name)
    for name in ["SerialPhasedExecution", "ParallelPhasedExecution", "Phase", "MultiConv",
                 "recomputationCheckpoint", "Attribute", "ctc_beam_search_decoder",
                 "DataLoader", "AsynchronousDataAccessor"]:
        if name not in vars(poptorch):  # others are adding these
            assert "not modelled yet" in caught(lambda: getattr(poptorch, name)).message
    with pytest.raises(AttributeError):
        poptorch.not_a_poptorch_name  # noqa: B018


def test_enums_have_poptorchs_names_and_values():
    enums = poptorch.enums
    assert [int(m) for m in enums.ReductionType] == [0, 1, 2]
    assert enums.ReductionType.Mean == 1 and enums.MeanReductionStrategy.Post == 1
    assert enums.CommGroupType.Orthogonal == 2 and enums.VariableRetrievalMode.AllReplicas == 2
    assert enums.ConnectionType.Never == 2 and enums.SyncPattern.ReplicaAndLadder == 2
    assert enums.HalfFloatCastingBehavior.HalfUpcastToFloat == 1
    assert enums.OverlapMode.NoOverlap.value == "no_overlap"
    assert poptorch.ReductionType is enums.ReductionType
    assert poptorch.CommGroupType is enums.CommGroupType
    assert enums.OutputMode is poptorch.OutputMode
    assert enums.MatMulSerializationMode is poptorch.MatMulSerializationMode
    assert enums.AutoStage is poptorch.AutoStage


def test_set_log_level_takes_poptorchs_names_and_integers():
    logger = logging.getLogger("poptorch")
    saved = logger.level
    try:
        for level, expected in [("OFF", logging.CRITICAL + 10), ("ERR", logging.ERROR),
                                ("WARN", logging.WARNING), ("INFO", logging.INFO),
                                ("DEBUG", logging.DEBUG), ("TRACE", logging.DEBUG),
                                ("TRACE_ALL", logging.DEBUG), (2, logging.INFO),
                                (4, logging.ERROR), ("debug", logging.DEBUG)]:
            poptorch.setLogLevel(level)
            assert logger.level == expected, level
        assert "TRACE_ALL" in caught(lambda: poptorch.setLogLevel("LOUD")).message
        caught(lambda: poptorch.setLogLevel(5))
    finally:
        logger.setLevel(saved)


@pytest.mark.parametrize("value,expected", [("DEBUG", "10"), ("ERR", "40"), ("1", "10"),
                                            ("", "30"), ("bogus", "30")])
def test_poptorch_log_level_is_read_at_import(value, expected):
    done = subprocess.run(
        [sys.executable, "-c", "import logging, ipupod.poptorch; "
         "print(logging.getLogger('poptorch').level)"],
        capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, POPTORCH_LOG_LEVEL=value))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected]
    assert ("POPTORCH_LOG_LEVEL" in done.stderr) == (value == "bogus")


def test_hardware_queries_without_a_server(no_server):
    assert poptorch.ipuHardwareIsAvailable() is False
    assert caught(poptorch.ipuHardwareVersion).code.name == "UNAVAILABLE"


def test_create_poptorch_error_and_compile_hooks():
    assert isinstance(poptorch.createPoptorchError("boom"), poptorch.Error)
    with pytest.raises(RuntimeError):
        poptorch.registerPreCompileHook(42)
    handle = poptorch.registerPostCompileHook(lambda: None)
    handle.remove()


def test_an_uncompiled_executor_reports_empty_counters_and_refuses_what_it_lacks():
    model = poptorch.inferenceModel(Net())
    assert not model.isCompiled()
    assert model.getPerfCounters() == {"input": [[]], "input_complete": [[]], "output": [[]],
                                       "output_complete": [[]]}
    assert model.getComputeLatency() == (0.0, 0.0, 0.0)
    assert model.model is model._model
    caught(model.compilationTime)
    error = caught(model.cycleCount)
    assert "logCycleCount" in error.message
    assert "compileAndExport" in caught(lambda: model.save).message
    assert "randomSeed" in caught(lambda: model.rng_state).message
    assert model.fc is model.model.fc  # the module's attributes as before


def test_the_cache_key_covers_the_model_the_settings_and_the_version(tmp_path, monkeypatch):
    base = _cache.key(b"onnx", {"seed": 1}, ["a=1"], {"train": True})
    assert base == _cache.key(b"onnx", {"seed": 1}, ["a=1"], {"train": True})
    assert base != _cache.key(b"onnx2", {"seed": 1}, ["a=1"], {"train": True})
    assert base != _cache.key(b"onnx", {"seed": 2}, ["a=1"], {"train": True})
    assert base != _cache.key(b"onnx", {"seed": 1}, ["a=2"], {"train": True})
    assert base != _cache.key(b"onnx", {"seed": 1}, ["a=1"], {"train": False})
    monkeypatch.setattr(_cache, "IPUPOD_VERSION", "9.9.9")
    assert base != _cache.key(b"onnx", {"seed": 1}, ["a=1"], {"train": True})
    assert _cache.lookup(str(tmp_path), base) is None

    def failing(path):
        with open(path, "wb") as file:
            file.write(b"half")
        raise RuntimeError("compile failed")

    with pytest.raises(RuntimeError):
        _cache.store(str(tmp_path / "cache"), base, failing)
    assert os.listdir(tmp_path / "cache") == []  # nothing half-written is left


# ---------------------------------------------------------------------- through ipupodd

class DropoutNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 32)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x, target):
        y = self.drop(self.fc(x)).sum(1)
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.ipupod(pod="POD4")
def test_dropout_without_a_seed_warns_with_the_seed_ipupod_chose(server):
    torch.manual_seed(3)
    x, target = torch.randn(2, 6), torch.randn(2)
    with pytest.warns(poptorch.PoptorchWarning, match=r"ipupod chose seed=\d+") as record:
        model = poptorch.trainingModel(DropoutNet())
        model(x, target)
    assert any(w.filename == __file__ for w in record), "attributed to the user's line"
    model.destroy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", poptorch.PoptorchWarning)
        seeded = poptorch.trainingModel(DropoutNet(), poptorch.Options().randomSeed(5))
        seeded(x, target)  # a seed given: nothing to warn about
    seeded.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_an_ipu_config_key_that_does_not_apply_warns(server):
    opts = poptorch.Options()
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))
    model = poptorch.trainingModel(Net(), opts)
    with pytest.warns(poptorch.PoptorchWarning, match="replicated_tensor_sharding.*ignored"):
        model(torch.randn(2, 6), torch.randn(2, 4))
    model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_executable_cache_skips_the_servers_compile_and_gives_the_same_results(
        server, tmp_path, monkeypatch):
    compiles = []
    real_compile = ipupod.Client.compile

    def counting(self, *args, **kwargs):
        compiles.append(1)
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(ipupod.Client, "compile", counting)
    torch.manual_seed(4)
    module = Net()
    x, target = torch.randn(4, 6), torch.randn(4, 4)
    cache = tmp_path / "cache"
    opts = poptorch.Options().deviceIterations(2).enableExecutableCaching(str(cache))
    first = poptorch.inferenceModel(module, opts)
    out = first(x)
    first.destroy()
    assert len(compiles) == 1
    assert sorted(p.suffix for p in cache.iterdir()) == [".ipx", ".json"]
    second = poptorch.inferenceModel(module, opts)
    torch.testing.assert_close(second(x), out, rtol=0, atol=0)
    assert len(compiles) == 1, "the second wrapper compiled on the server"
    assert second.isCompiled()
    second.destroy()
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(cache))  # PopTorch's variable, same entry
    third = poptorch.inferenceModel(module, poptorch.Options().deviceIterations(2))
    torch.testing.assert_close(third(x), out, rtol=0, atol=0)
    assert len(compiles) == 1
    third.destroy()
    other = poptorch.inferenceModel(module, poptorch.Options().deviceIterations(4))
    other(torch.randn(8, 6))
    assert len(compiles) == 2, "other options are another entry"
    other.destroy()
    # training: cached too (the key holds the weights the ONNX carries), and it trains as
    # torch does
    torch.manual_seed(8)
    initial = Net().state_dict()
    trained = poptorch.trainingModel(Net(), opts)
    trained.model.load_state_dict(initial)
    trained(x, target)
    trained.destroy()
    assert len(compiles) == 3
    model, reference = Net(), Net()
    model.load_state_dict(initial)
    reference.load_state_dict(initial)
    again = poptorch.trainingModel(model, opts)
    again(x, target)
    assert len(compiles) == 3, "the same model and options: a cache hit"
    again.copyWeightsToHost()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    for step in range(2):
        optimizer.zero_grad()
        reference(x[2 * step:2 * step + 2], target[2 * step:2 * step + 2])[1].backward()
        optimizer.step()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight, rtol=1e-5, atol=1e-6)
    again.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_a_cached_executable_the_server_lost_is_uploaded_not_compiled(server, tmp_path,
                                                                     monkeypatch):
    torch.manual_seed(5)
    module = Net()
    x = torch.randn(2, 6)
    opts = poptorch.Options().enableExecutableCaching(str(tmp_path))
    first = poptorch.inferenceModel(module, opts)
    out = first(x)
    first.destroy()
    server.stop()
    server.start()  # a new server: its executable cache is empty
    monkeypatch.setattr(ipupod.Client, "compile", lambda *a, **k: pytest.fail("compiled"))
    second = poptorch.inferenceModel(module, opts)
    torch.testing.assert_close(second(x), out, rtol=0, atol=0)
    second.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_perf_counters_cycle_count_and_latency_follow_the_simulated_time(server):
    torch.manual_seed(6)
    module = Net().eval()
    opts = poptorch.Options().deviceIterations(4).logCycleCount(True)
    model = poptorch.inferenceModel(module, opts)
    recorded = []
    real_record = model._record_run
    model._record_run = lambda result, arrays: (recorded.append(result.stats),
                                                real_record(result, arrays))
    x = torch.randn(8, 6)
    torch.testing.assert_close(model(x), module(x), rtol=1e-5, atol=1e-6)
    assert model.isCompiled() and model.compilationTime().total_seconds() > 0
    stats = recorded[-1]
    assert stats.simulated_seconds > 0
    assert model.cycleCount() == round(stats.simulated_seconds * 1.33e9)
    counters = model.getPerfCounters()
    assert sorted(counters) == ["input", "input_complete", "output", "output_complete"]
    assert [len(v) for v in counters["input"]] == [4]  # one input, 4 device iterations
    assert [len(v) for v in counters["output"]] == [4]  # OutputMode.All for inference
    start, end = counters["input"][0][0], counters["output_complete"][0][-1]
    assert end - start == pytest.approx(stats.simulated_seconds, rel=1e-9)
    for before, after in zip(counters["input"][0], counters["input_complete"][0]):
        assert after >= before
    low, high, mean = model.getComputeLatency()
    assert 0 < low <= mean <= high <= stats.simulated_seconds
    assert model.getLatency()[2] >= mean
    model(x)
    later = model.getPerfCounters()
    assert later["input"][0][0] >= end  # the device clock runs on
    model.destroy()
    assert not model.isCompiled()
    training = poptorch.trainingModel(Net(), poptorch.Options().deviceIterations(2))
    training(torch.randn(4, 6), torch.randn(4, 4))
    counters = training.getPerfCounters()
    assert [len(v) for v in counters["input"]] == [2, 2]  # x and target, 2 micro-batches
    assert [len(v) for v in counters["output"]] == [1, 1]  # OutputMode.Final
    assert "logCycleCount" in caught(training.cycleCount).message
    training.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_4_1_1_the_config_files_synthetic_data_runs_without_host_io(server, tmp_path):
    path = tmp_path / "poptorch.conf"
    # seed 003, 4.1.1: the config file, line for line
    path.write_text("deviceIterations(1)\n"
                    "setExecutionStrategy(poptorch.ShardedExecution())\n"
                    "replicationFactor(1)\n"
                    "enableSyntheticData(True)\n")
    opts = poptorch.Options()
    opts.loadFromFile(str(path))
    torch.manual_seed(13)
    module = Net().eval()
    x = torch.randn(64, 6)
    runs = {}
    for synthetic in (False, True):
        model = poptorch.inferenceModel(module, opts.clone().enableSyntheticData(synthetic))
        recorded = []
        real_record = model._record_run
        model._record_run = lambda result, arrays: (recorded.append(result.stats),
                                                    real_record(result, arrays))
        runs[synthetic] = (model(x), recorded[-1], model.getPerfCounters())
        model.destroy()
    real, synthetic = runs[False], runs[True]
    torch.testing.assert_close(real[0], module(x), rtol=1e-5, atol=1e-6)
    assert synthetic[0].shape == real[0].shape and not synthetic[0].any()  # nothing comes back
    assert real[1].simulated_host_seconds > 0
    assert synthetic[1].simulated_host_seconds == 0  # no host I/O in the simulated time
    assert synthetic[1].simulated_seconds < real[1].simulated_seconds
    counters = synthetic[2]
    assert counters["input_complete"][0][0] == counters["input"][0][0]


@pytest.mark.ipupod(pod="POD4")
def test_input_replica_grouping_sends_each_group_its_data(server):
    torch.manual_seed(7)
    module = Net().eval()
    for kind, expected_groups in [(poptorch.CommGroupType.Consecutive, [0, 0, 1, 1]),
                                  (poptorch.CommGroupType.Orthogonal, [0, 1, 0, 1])]:
        opts = poptorch.Options().replicationFactor(4).inputReplicaGrouping(2, kind)
        model = poptorch.inferenceModel(module, opts)
        x = torch.randn(2 * 3, 6)  # micro-batch 3 x 2 groups
        out = model(x)
        assert out.shape == (4 * 3, 4)
        groups = x.reshape(2, 3, 6)
        for replica, group in enumerate(expected_groups):
            torch.testing.assert_close(out[3 * replica:3 * replica + 3], module(groups[group]),
                                       rtol=1e-5, atol=1e-6)
        model.destroy()
        with pytest.raises(ValueError, match="input_group_size 2"):
            poptorch.inferenceModel(module, opts)(torch.randn(5, 6))
    # training: replicas of a group compute the same gradient; the mean is the groups' mean
    torch.manual_seed(8)
    model, reference = Net(), Net()
    reference.load_state_dict(model.state_dict())
    opts = poptorch.Options().replicationFactor(2)
    opts.inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    x, target = torch.randn(3, 6), torch.randn(3, 4)
    _, loss = training(x, target)
    training.copyWeightsToHost()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    cpu_loss = reference(x, target)[1]
    cpu_loss.backward()
    optimizer.step()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss.reshape(-1), torch.stack([cpu_loss.detach()] * 2),
                               rtol=1e-5, atol=1e-6)
    training.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_connection_type_never_compiles_without_attaching(server):
    x = torch.randn(2, 6)
    opts = poptorch.Options().connectionType(poptorch.ConnectionType.Never)
    model = poptorch.inferenceModel(Net(), opts)
    model.compile(x)
    assert model.isCompiled() and not model.isAttachedToDevice()
    assert "offline device" in caught(lambda: model(x)).message
    offline = poptorch.inferenceModel(Net(), poptorch.Options().useOfflineIpuTarget())
    offline.compile(x)
    assert not offline.isAttachedToDevice()
    offline(x)  # ipupod's offline target still runs when called
    assert offline.isAttachedToDevice()
    offline.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_use_ipu_id_attaches_in_the_partition_of_that_device_id(server):
    client = server.client(user="poptorch-user")
    partition = client.create_partition("mine", 1)
    module = Net().eval()
    x = torch.randn(2, 6)
    model = poptorch.inferenceModel(module, poptorch.Options().useIpuId(partition.device_id))
    torch.testing.assert_close(model(x), module(x), rtol=1e-5, atol=1e-6)
    [session] = client.list_sessions()
    assert session.partition == "mine"
    model.destroy()
    missing = poptorch.inferenceModel(module, poptorch.Options().useIpuId(29))
    error = caught(lambda: missing(x))
    assert error.code.name == "NOT_FOUND" and "ipupod partition create" in error.message
    pair = client.create_partition("pair", 2)
    wrong = poptorch.inferenceModel(module, poptorch.Options().useIpuId(pair.device_id))
    assert "needs 1" in caught(lambda: wrong(x)).message
    client.close()


@pytest.mark.ipupod(pod="POD4")
def test_broadcast_buffers_false_trains_with_each_replicas_own_batchnorm_statistics(server):
    class Normed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 4)
            self.norm = torch.nn.BatchNorm1d(4)

        def forward(self, x, target):
            y = self.norm(self.fc(x))
            return y, torch.nn.functional.mse_loss(y, target)

    torch.manual_seed(11)
    model = Normed()
    reference = copy.deepcopy(model)
    def buffers():
        return {name: b.clone() for name, b in reference.norm.named_buffers()}

    stats = [buffers(), buffers()]  # each replica's running statistics
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    opts.Training.gradientAccumulation(2)
    poptorch_model = poptorch.trainingModel(model, opts,
                                            torch.optim.SGD(model.parameters(), lr=0.1))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        x, target = torch.randn(16, 6), torch.randn(16, 4)  # micro-batch 4 x 2 x 2
        poptorch_model(x, target)
        optimizer.zero_grad()
        for m in range(2):
            for replica in range(2):  # host micro-batch m * replicas + replica
                j = m * 2 + replica
                with torch.no_grad():
                    for name, b in reference.norm.named_buffers():
                        b.copy_(stats[replica][name])
                loss = reference(x[4 * j:4 * j + 4], target[4 * j:4 * j + 4])[1]
                (loss / 4).backward()
                stats[replica] = buffers()
        optimizer.step()
    poptorch_model.copyWeightsToHost()
    for name, value in reference.named_parameters():
        torch.testing.assert_close(model.get_parameter(name), value, rtol=1e-5, atol=1e-6,
                                   msg=name)
    for name in ("running_mean", "running_var"):  # replica 0's
        torch.testing.assert_close(model.norm.get_buffer(name), stats[0][name], rtol=1e-5,
                                   atol=1e-6, msg=name)
    assert not torch.allclose(stats[0]["running_mean"], stats[1]["running_mean"])
    poptorch_model.destroy()


@pytest.mark.ipupod(pod="POD4")
def test_hardware_queries_ask_the_server(server):
    assert poptorch.ipuHardwareVersion() == 2
    assert poptorch.ipuHardwareIsAvailable()
    assert poptorch.ipuHardwareIsAvailable(4)
    assert not poptorch.ipuHardwareIsAvailable(8)  # a POD4
    assert not poptorch.ipuHardwareIsAvailable(3)  # no device of 3 IPUs


@pytest.mark.ipupod(pod="POD4")
def test_the_logger_says_what_the_front_end_does_and_hooks_run(server, caplog):
    calls = []
    before = poptorch.registerPreCompileHook(lambda: calls.append("pre"))
    after = poptorch.registerPostCompileHook(lambda: calls.append("post"))
    try:
        with caplog.at_level(logging.DEBUG, logger="poptorch"):
            model = poptorch.trainingModel(Net(), poptorch.Options().modelName("tiny"))
            model(torch.randn(2, 6), torch.randn(2, 4))
            model.model(torch.randn(2, 6))  # the module on the CPU: an implicit copy
            model.destroy()
    finally:
        before.remove()
        after.remove()
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "poptorch")
    assert "compiling tiny" in text and "compiled tiny" in text
    assert "tiny: attached, session" in text
    assert "implicit copyWeightsToHost() of tiny" in text
    assert calls == ["pre", "post"]


@pytest.mark.ipupod(pod="POD4")
def test_blocks_warn_about_layers_per_ipu_only_when_the_user_set_it(server):
    class TwoStages(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(6, 6)
            self.second = poptorch.BeginBlock(torch.nn.Linear(6, 4), ipu_id=1)

        def forward(self, x):
            return self.second(torch.relu(self.first(x)))

    module = TwoStages().eval()
    x = torch.randn(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", poptorch.PoptorchWarning)
        model = poptorch.inferenceModel(module, poptorch.Options().deviceIterations(2))
        torch.testing.assert_close(model(x), module(x), rtol=1e-5, atol=1e-6)
    model.destroy()
    opts = poptorch.Options().deviceIterations(2).ipuConfig({"inference_ipus_per_replica": 1})
    model = poptorch.inferenceModel(module, opts)
    with pytest.warns(poptorch.PoptorchWarning, match="layers_per_ipu are ignored"):
        model(x)
    model.destroy()
