"""``poptorch.DataLoader``, ``poptorch.AsynchronousDataAccessor`` and
``poptorch.DataLoaderMode``: PopTorch's batch rule, drop_last, shuffling, workers and
distributed blocks, the Async modes yielding Sync's batches, and (against a private ipupodd)
PopTorch's data-loading examples trained and compared with torch on the CPU.

Waits poll with a deadline; nothing sleeps for a condition."""

import gc
import logging
import threading
import time
import types

import pytest

torch = pytest.importorskip("torch")

import ipupod.poptorch as poptorch  # noqa: E402

Mode = poptorch.DataLoaderMode
DEADLINE_SECONDS = 10.0


def wait_until(condition, what, seconds=DEADLINE_SECONDS):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def numbers(count, width=2):
    """Sample i is ([i, i + 0.5, ...], i): easy to tell which samples a batch holds."""
    x = torch.arange(count, dtype=torch.float32).unsqueeze(1) + \
        torch.arange(width, dtype=torch.float32) / width
    return torch.utils.data.TensorDataset(x, torch.arange(count))


def labels(batches):
    return [batch[1].tolist() for batch in batches]


def options(iterations=1, replicas=1, accumulation=1):
    opts = poptorch.Options().deviceIterations(iterations).replicationFactor(replicas)
    opts.Training.gradientAccumulation(accumulation)
    return opts


def distributed(opts, process_id, processes):
    """Options of process ``process_id`` of ``processes`` (``Options.Distributed`` when the
    options have it, else the attribute the loader reads)."""
    current = getattr(opts, "Distributed", None)
    if current is not None and hasattr(current, "configureProcessId"):
        current.configureProcessId(process_id, processes)
    else:
        opts.Distributed = types.SimpleNamespace(numProcesses=processes, processId=process_id)
    return opts


class Counting(torch.utils.data.Dataset):
    """Counts its reads; sample ``fail_at`` raises KeyError (while ``failures`` last)."""

    def __init__(self, count, fail_at=None, failures=1):
        self.count, self.fail_at, self.failures = count, fail_at, failures
        self.reads = 0
        self.lock = threading.Lock()

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        with self.lock:
            self.reads += 1
        if index == self.fail_at and self.failures > 0:
            self.failures -= 1
            raise KeyError(f"sample {index} is unreadable")
        return torch.tensor([float(index)]), index


class Stream(torch.utils.data.IterableDataset):
    """0..count-1, split between torch's workers by id."""

    def __init__(self, count):
        self.count = count

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(worker, self.count, workers):
            yield torch.tensor([float(i)]), i


def no_init(worker_id):
    pass


# ---------------------------------------------------------------------- the batch rule


@pytest.mark.parametrize("iterations, replicas, accumulation, batch_size", [
    (1, 1, 1, 1), (1, 1, 1, 4), (2, 1, 1, 3), (1, 2, 1, 2), (2, 2, 2, 2), (3, 1, 2, 1)])
def test_each_batch_is_micro_batch_times_iterations_replicas_accumulation(
        iterations, replicas, accumulation, batch_size):
    combined = batch_size * iterations * replicas * accumulation
    loader = poptorch.DataLoader(options(iterations, replicas, accumulation), numbers(100),
                                 batch_size=batch_size)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert loader.combinedBatchSize == combined
    batches = list(loader)
    assert len(loader) == len(batches) == 100 // combined
    assert [b[0].shape for b in batches] == [torch.Size([combined, 2])] * (100 // combined)
    assert labels(batches) == [list(range(i * combined, (i + 1) * combined))
                               for i in range(100 // combined)]


def test_the_options_are_kept_and_inference_options_count_the_same_way():
    opts = options(iterations=4)
    loader = poptorch.DataLoader(opts, numbers(20), batch_size=2)
    assert loader.options is opts and loader.combinedBatchSize == 8
    assert loader.batch_size == 8  # torch's loader loads one call's batch at a time


def test_drop_last_drops_the_incomplete_combined_batch_by_default():
    loader = poptorch.DataLoader(options(2, 1, 2), numbers(50), batch_size=3)  # 12 a call
    assert labels(loader) == [list(range(i, i + 12)) for i in range(0, 48, 12)]
    assert len(loader) == 4


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.name)
def test_drop_last_false_returns_the_rest_smaller_and_warns(mode, caplog):
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        loader = poptorch.DataLoader(options(2, 1, 2), numbers(50), batch_size=3,
                                     drop_last=False, mode=mode)
    assert "not divisible by the number of elements processed per step (12)" in caplog.text
    assert "batch size of 2" in caplog.text
    got = labels(loader)
    assert got == [list(range(i, min(i + 12, 50))) for i in range(0, 50, 12)]
    assert len(loader) == 5 and len(got[-1]) == 2
    loader.terminate()


def test_batch_size_none_loads_samples_unbatched():
    loader = poptorch.DataLoader(options(2), numbers(4), batch_size=None, drop_last=False)
    assert loader.combinedBatchSize is None
    assert [int(y) for _, y in loader] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="batch_size=None .* pass drop_last=False"):
        poptorch.DataLoader(options(2), numbers(4), batch_size=None)


def test_a_batch_sampler_gives_the_micro_batches_and_they_are_combined():
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(22)),
                                            batch_size=2, drop_last=False)
    loader = poptorch.DataLoader(options(iterations=3), numbers(22), batch_sampler=sampler)
    assert loader.combinedBatchSize == 6
    assert labels(loader) == [list(range(i, i + 6)) for i in range(0, 18, 6)]
    assert len(loader) == 3
    loader = poptorch.DataLoader(options(iterations=3), numbers(22), batch_sampler=sampler,
                                 drop_last=False)
    assert labels(loader)[-1] == [18, 19, 20, 21] and len(loader) == 4


# ---------------------------------------------------------------------- shuffling


def test_shuffle_follows_torchs_seed_as_a_torch_loader_of_the_combined_batch_does():
    torch.manual_seed(5)
    ours = labels(poptorch.DataLoader(options(2, 2), numbers(40), batch_size=2, shuffle=True))
    torch.manual_seed(5)
    plain = labels(torch.utils.data.DataLoader(numbers(40), batch_size=8, shuffle=True,
                                               drop_last=True))
    assert ours == plain
    assert sorted(sum(ours, [])) != sum(ours, []) and len(set(sum(ours, []))) == 40
    torch.manual_seed(5)
    again = labels(poptorch.DataLoader(options(2, 2), numbers(40), batch_size=2,
                                       shuffle=True))
    assert again == ours


def test_each_epoch_is_shuffled_again():
    torch.manual_seed(0)
    loader = poptorch.DataLoader(options(), numbers(32), batch_size=8, shuffle=True)
    first, second = labels(loader), labels(loader)
    assert first != second
    assert sorted(sum(first, [])) == sorted(sum(second, [])) == list(range(32))


# ---------------------------------------------------------------------- workers and kwargs


def worker_and_index(batch):
    info = torch.utils.data.get_worker_info()
    return {"index": torch.stack([x[0] for x, _ in batch]),
            "worker": torch.full((len(batch),), -1 if info is None else info.id)}


def test_num_workers_collate_fn_and_persistent_workers_pass_through():
    loader = poptorch.DataLoader(options(iterations=2), numbers(24), batch_size=3,
                                 num_workers=2, collate_fn=worker_and_index,
                                 worker_init_fn=no_init)
    assert loader.persistent_workers and loader.num_workers == 2
    assert loader.worker_init_fn is no_init
    for _ in range(2):  # two epochs through the same (persistent) workers
        batches = list(loader)
        assert [b["index"].tolist() for b in batches] == \
            [[float(i) for i in range(s, s + 6)] for s in range(0, 24, 6)]
        assert {int(w) for b in batches for w in b["worker"]} == {0, 1}
    single = poptorch.DataLoader(options(), numbers(4), batch_size=2)
    assert not single.persistent_workers
    not_kept = poptorch.DataLoader(options(), numbers(4), batch_size=2, num_workers=1,
                                   persistent_workers=False)
    assert not not_kept.persistent_workers


def test_an_iterable_dataset_with_several_workers_and_no_worker_init_fn_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        poptorch.DataLoader(options(), Stream(10), batch_size=2, num_workers=2)
    assert "no worker_init_fn" in caplog.text


def test_async_rebatched_uses_the_samples_each_worker_leaves_over():
    # PopTorch's example, with 2 workers: 100 samples lose 4 in Sync (each worker drops its
    # incomplete batch of 2); AsyncRebatched builds the batches from smaller ones, loses none.
    sync = poptorch.DataLoader(options(), Stream(100), batch_size=4, num_workers=2,
                               worker_init_fn=no_init)
    rebatched = poptorch.DataLoader(options(), Stream(100), batch_size=4, num_workers=2,
                                    worker_init_fn=no_init, mode=Mode.AsyncRebatched,
                                    rebatched_worker_size=2)
    sync_samples = sum(labels(sync), [])
    rebatched_batches = labels(rebatched)
    assert len(sync_samples) == 96
    assert [len(b) for b in rebatched_batches] == [4] * 25
    assert sorted(sum(rebatched_batches, [])) == list(range(100))
    rebatched.terminate()


# ---------------------------------------------------------------------- Async == Sync


@pytest.mark.parametrize("mode", [Mode.Async, Mode.AsyncRebatched], ids=lambda m: m.name)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
def test_async_modes_yield_syncs_batches_in_syncs_order(mode, num_workers, shuffle):
    def epochs(loader_mode):
        torch.manual_seed(11)
        loader = poptorch.DataLoader(options(2, 1, 2), numbers(70), batch_size=3,
                                     shuffle=shuffle, num_workers=num_workers, mode=loader_mode,
                                     rebatched_worker_size=4)
        got = [[(x.clone(), y.clone()) for x, y in loader] for _ in range(3)]
        torch.manual_seed(11)  # a script that reseeds gets the same epoch again
        got.append([(x.clone(), y.clone()) for x, y in loader])
        assert len(loader) == 5
        loader.terminate()
        return got

    expected, got = epochs(Mode.Sync), epochs(mode)
    assert [[y.tolist() for _, y in e] for e in got] == \
        [[y.tolist() for _, y in e] for e in expected]
    for epoch, sync_epoch in zip(got, expected):
        for (x, _), (sync_x, _) in zip(epoch, sync_epoch):
            assert torch.equal(x, sync_x)
    assert [len(e) for e in got] == [5] * 4
    orders = [[y.tolist() for _, y in e] for e in got]
    assert (orders[0] != orders[1]) == shuffle


def test_async_keeps_dict_and_nested_batches():
    def collate(batch):
        return {"x": torch.stack([x for x, _ in batch]),
                "pair": (torch.tensor([y for _, y in batch]), [torch.ones(len(batch))])}

    for mode in Mode:
        loader = poptorch.DataLoader(options(iterations=2), numbers(12), batch_size=2,
                                     mode=mode, collate_fn=collate)
        batches = list(loader)
        assert [b["pair"][0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                            [8, 9, 10, 11]]
        assert isinstance(batches[0]["pair"], tuple) and batches[0]["pair"][1][0].shape == (4,)
        loader.terminate()


def test_stopping_early_and_iterating_again_starts_a_fresh_epoch():
    loader = poptorch.DataLoader(options(), numbers(40), batch_size=4, mode=Mode.Async)
    iterator = iter(loader)
    assert [next(iterator)[1].tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                              [8, 9, 10, 11]]
    assert labels(loader) == [list(range(i, i + 4)) for i in range(0, 40, 4)]
    with pytest.raises(StopIteration):
        next(iterator)  # the epoch ended; the next one starts with iter()
    assert labels(loader)[0] == [0, 1, 2, 3]
    loader.terminate()


@pytest.mark.parametrize("load_indefinitely, early_preload", [
    (False, False), (True, True), (False, True)])
def test_the_accessors_options(load_indefinitely, early_preload):
    dataset = Counting(32)
    loader = poptorch.DataLoader(options(), dataset, batch_size=4, mode=Mode.Async,
                                 async_options={"buffer_size": 2,
                                                "load_indefinitely": load_indefinitely,
                                                "early_preload": early_preload,
                                                "miss_sleep_time_in_ms": 1.0,
                                                "sharing_strategy":
                                                    poptorch.enums.SharingStrategy.Fork})
    if early_preload:  # loading starts without an iterator: two batches, then a third waits
        wait_until(lambda: dataset.reads >= 8, "the buffer to fill before iterating")
        assert dataset.reads <= 12
    else:
        assert dataset.reads == 0
    for _ in range(3):
        assert [[int(v) for v in y] for _, y in loader] == \
            [list(range(i, i + 4)) for i in range(0, 32, 4)]
    loader.terminate()


def test_the_accessor_loads_at_most_buffer_size_batches_ahead():
    dataset = Counting(400)
    accessor = poptorch.AsynchronousDataAccessor(
        torch.utils.data.DataLoader(dataset, batch_size=10), buffer_size=3)
    iterator = iter(accessor)
    assert next(iterator)[1].tolist() == list(range(10))
    wait_until(lambda: dataset.reads >= 40, "three batches loaded ahead")
    # three batches wait in the buffer and the worker holds at most one more
    assert dataset.reads <= 50
    assert len(accessor) == 40
    accessor.terminate()


def test_an_accessor_rebatches_a_torch_loader():
    accessor = poptorch.AsynchronousDataAccessor(
        torch.utils.data.DataLoader(numbers(23), batch_size=3), rebatched_size=5)
    assert len(accessor) == 4  # 7 batches of 3 (+2): 23 samples, 4 whole batches of 5
    assert labels(accessor) == [list(range(i, i + 5)) for i in range(0, 20, 5)]
    accessor.terminate()


# ---------------------------------------------------------------------- errors and stopping


@pytest.mark.parametrize("mode, num_workers", [
    (Mode.Async, 0), (Mode.AsyncRebatched, 0), (Mode.Async, 2)],
    ids=["Async", "AsyncRebatched", "Async-2-workers"])
def test_an_exception_in_the_dataset_is_raised_in_the_loop(mode, num_workers):
    loader = poptorch.DataLoader(options(iterations=2), Counting(40, fail_at=13),
                                 batch_size=2, mode=mode, num_workers=num_workers)
    seen = []
    with pytest.raises(KeyError, match="sample 13 is unreadable"):
        for _, y in loader:
            seen.append(y.tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    if num_workers == 0:  # the sample reads again: a new epoch runs to the end
        assert len(labels(loader)) == 10
    loader.terminate()
    del loader
    # torch's error keeps its worker processes in a reference cycle, whose collection waits
    # 5 s for each: pay it here rather than in a later test.
    gc.collect()


def test_terminate_stops_the_worker_even_when_its_buffer_is_full():
    loader = poptorch.DataLoader(options(), Counting(1000), batch_size=1, mode=Mode.Async,
                                 async_options={"buffer_size": 1})
    iterator = iter(loader)
    next(iterator)
    worker = loader._accessor._thread
    assert worker.is_alive()
    started = time.monotonic()
    loader.terminate()
    assert not worker.is_alive() and time.monotonic() - started < 5
    with pytest.raises(RuntimeError, match="terminated; create a new one"):
        next(iterator)
    with pytest.raises(RuntimeError, match="terminated"):
        iter(loader)
    loader.terminate()  # twice is harmless


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_worker_stops_when_the_loader_is_garbage_collected(num_workers):
    loader = poptorch.DataLoader(options(), Counting(1000), batch_size=2, mode=Mode.Async,
                                 num_workers=num_workers)
    iterator = iter(loader)
    next(iterator)
    worker, shared = loader._accessor._thread, loader._accessor._shared
    wait_until(lambda: shared.ready.full(), "the buffer to fill")
    del loader, iterator
    gc.collect()
    wait_until(lambda: not worker.is_alive(), "the worker thread to stop")


# ---------------------------------------------------------------------- refused


def test_invalid_arguments_are_refused_saying_what_to_do():
    dataset = numbers(10)
    with pytest.raises(ValueError, match="first argument is the model's poptorch.Options"):
        poptorch.DataLoader(None, dataset, batch_size=2)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, not 0"):
        poptorch.DataLoader(options(), dataset, batch_size=0)
    with pytest.raises(ValueError, match="mode must be a poptorch.DataLoaderMode"):
        poptorch.DataLoader(options(), dataset, mode="async")
    with pytest.raises(ValueError, match=r"rebatched_worker_size \(5\) must be at most the "
                       r"combined batch size \(4\)"):
        poptorch.DataLoader(options(2), dataset, batch_size=2, mode=Mode.AsyncRebatched,
                            rebatched_worker_size=5)
    with pytest.raises(ValueError, match="async_options cannot set rebatched_size"):
        poptorch.DataLoader(options(), dataset, mode=Mode.Async,
                            async_options={"rebatched_size": 2})
    sampler = torch.utils.data.BatchSampler(range(10), 2, False)
    with pytest.raises(ValueError, match="mutually exclusive with batch_size and shuffle"):
        poptorch.DataLoader(options(), dataset, batch_size=2, batch_sampler=sampler)
    async_loader = poptorch.DataLoader(options(), dataset, batch_size=2, mode=Mode.Async)
    with pytest.raises(ValueError, match="already reads through an AsynchronousDataAccessor"):
        poptorch.AsynchronousDataAccessor(async_loader)
    async_loader.terminate()
    keeps_last = poptorch.DataLoader(options(2), dataset, batch_size=3, drop_last=False)
    with pytest.raises(ValueError, match="drop_last=False needs rebatched_size"):
        poptorch.AsynchronousDataAccessor(keeps_last)
    with pytest.raises(ValueError, match="rebatched_size must be None or an integer greater "
                       "than 1"):
        poptorch.AsynchronousDataAccessor(keeps_last, rebatched_size=1)
    with pytest.raises(ValueError, match="buffer_size must be a positive integer"):
        poptorch.AsynchronousDataAccessor([1, 2], buffer_size=0)


# ---------------------------------------------------------------------- distributed


def test_each_process_reads_its_own_block_and_shuffles_with_the_options_seed():
    def process(pid, shuffle=False, drop_last=True):
        opts = distributed(options(iterations=2), pid, 2)
        if shuffle:
            opts.randomSeed(42)
        return poptorch.DataLoader(opts, numbers(53), batch_size=3, shuffle=shuffle,
                                   drop_last=drop_last)

    # 53 samples, 6 a call, 2 processes: 24 each (4 calls), 5 left over
    assert labels(process(0)) == [list(range(i, i + 6)) for i in range(0, 24, 6)]
    assert labels(process(1)) == [list(range(i, i + 6)) for i in range(24, 48, 6)]
    loaders = [process(0, shuffle=True), process(1, shuffle=True)]
    for _ in range(2):
        epoch = [sum(labels(loader), []) for loader in loaders]
        assert len(epoch[0]) == len(epoch[1]) == 24
        assert not set(epoch[0]) & set(epoch[1])
        assert epoch[0] != sorted(epoch[0])
    evenly = [sum(labels(process(pid, drop_last=False)), []) for pid in (0, 1)]
    assert evenly == [list(range(0, 27)), list(range(27, 53))]


def test_distributed_runs_refuse_what_cannot_be_split():
    with pytest.raises(ValueError, match=r"call options.randomSeed\(N\)"):
        poptorch.DataLoader(distributed(options(), 0, 2), numbers(10), shuffle=True)
    with pytest.raises(ValueError, match="does not split an IterableDataset"):
        poptorch.DataLoader(distributed(options(), 0, 2), Stream(10))
    with pytest.raises(ValueError, match="fewer than one combined batch"):
        poptorch.DataLoader(distributed(options(4), 1, 2), numbers(10), batch_size=2)
    own = poptorch.DataLoader(distributed(options(), 1, 2), numbers(10), batch_size=5,
                              auto_distributed_partitioning=False)
    assert labels(own) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


# ---------------------------------------------------------------------- on a pod


class ExampleModelWithLoss(torch.nn.Module):
    """PopTorch's batching example (docs/user_guide/device_iterations.py)."""

    def __init__(self, data_shape, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(data_shape[0] * data_shape[1], num_classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target=None):
        reshaped = x.reshape([x.shape[0], -1])
        fc = self.fc(reshaped)
        if target is not None:
            return fc, self.loss(fc, target)
        return fc


class ExampleDataset(torch.utils.data.Dataset):
    def __init__(self, shape, length):
        super().__init__()
        self._shape, self._length = shape, length
        self._all_data, self._all_labels = [], []
        torch.manual_seed(0)
        for _ in range(length):
            label = 1 if torch.rand(()) > 0.5 else 0
            data = torch.rand(self._shape) + label
            data[0] = -data[0]
            self._all_data.append(data)
            self._all_labels.append(label)

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        return self._all_data[index], self._all_labels[index]


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.parametrize("mode", [Mode.Sync, Mode.Async], ids=lambda m: m.name)
def test_poptorchs_gradient_accumulation_example_trains_as_torch_does(server, mode):
    # PopTorch's gradient_accumulation_example (device_iterations.py), smaller: 2 device
    # iterations of 2 accumulated micro-batches of 2 samples, 8 samples a call.
    model_batch_size = 2
    opts = poptorch.Options()
    opts.deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    training_data = poptorch.DataLoader(opts, dataset=ExampleDataset(shape=[3, 2], length=61),
                                        batch_size=model_batch_size, shuffle=True,
                                        drop_last=True, mode=mode)
    torch.manual_seed(3)
    model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
    reference = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
    reference.load_state_dict(model.state_dict())
    poptorch_model = poptorch.trainingModel(
        model, options=opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    seen, losses = [], []
    for epoch in range(2):
        for data, labels_ in training_data:
            output, loss = poptorch_model(data, labels_)
            seen.append((data.clone(), labels_.clone()))
            losses.append(float(loss))
    poptorch_model.copyWeightsToHost()
    poptorch_model.destroy()
    training_data.terminate()

    assert len(seen) == 2 * (61 // 8) and all(d.shape == (8, 3, 2) for d, _ in seen)
    epochs = [torch.cat([d for d, _ in seen[e * 7:e * 7 + 7]]).reshape(56, 6) for e in (0, 1)]
    assert len(epochs[0].unique(dim=0)) == 56 and not torch.equal(epochs[0], epochs[1])
    cpu = torch.optim.SGD(reference.parameters(), lr=0.1)
    cpu_losses = []
    for data, labels_ in seen:
        for update in range(2):  # one weight update per device iteration: 2 x 2 samples
            rows = slice(4 * update, 4 * update + 4)
            cpu.zero_grad()
            reference(data[rows], labels_[rows])[1].backward()
            if update == 1:  # OutputMode Final: the loss of the call's last micro-batch
                with torch.no_grad():
                    cpu_losses.append(float(reference(data[6:], labels_[6:])[1]))
            cpu.step()
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.fc.weight, reference.fc.weight, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.fc.bias, reference.fc.bias, rtol=1e-4, atol=1e-5)
    torch.manual_seed(3)
    assert not torch.allclose(model.fc.weight, ExampleModelWithLoss([3, 2], 2).fc.weight)


@pytest.mark.ipupod(pod="POD4")
def test_poptorchs_data_accessor_example_runs_inference_on_each_batch(server):
    # PopTorch's data_accessor_example: an inference model fed by an Async DataLoader.
    opts = poptorch.Options()
    opts.deviceIterations(2)
    opts.replicationFactor(2)
    loader = poptorch.DataLoader(opts, ExampleDataset(shape=[3, 2], length=30),
                                 batch_size=3, num_workers=0, mode=poptorch.DataLoaderMode.Async)
    torch.manual_seed(4)
    model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2).eval()
    poptorch_model = poptorch.inferenceModel(model, opts)
    outputs, inputs = [], []
    for it, (data, _) in enumerate(loader):
        outputs.append(poptorch_model(data))
        inputs.append(data.clone())
    poptorch_model.destroy()
    loader.terminate()
    assert [d.shape[0] for d in inputs] == [12, 12]
    with torch.no_grad():
        for data, out in zip(inputs, outputs):
            torch.testing.assert_close(out, model(data), rtol=1e-5, atol=1e-5)
