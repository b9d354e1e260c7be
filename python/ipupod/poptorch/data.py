"""PopTorch's data loading: ``poptorch.DataLoader``, ``poptorch.AsynchronousDataAccessor``
and ``poptorch.DataLoaderMode``.

:class:`DataLoader` is ``torch.utils.data.DataLoader`` with PopTorch's batch rule: each
iteration yields what one call of a wrapped model consumes, ``batch_size`` (the micro-batch)
x ``deviceIterations`` x ``replicationFactor`` x ``Training.gradientAccumulation`` samples
(:attr:`DataLoader.combinedBatchSize`). With ``Options.Distributed`` over several processes
each process reads its own block of the dataset, as PopTorch's does.

:class:`AsynchronousDataAccessor` loads ahead of the loop that iterates it, in a background
thread, into a buffer of ``buffer_size`` batches: the next batches are read while the model
runs on the server. It yields the batches Sync yields, in the same order; the random draws
of an epoch (a shuffling sampler's seed) are taken in the iterating thread when the epoch
starts, as a synchronous loader takes them, so a seeded script gets the same order in every
mode. An exception of the dataset is raised in the iterating loop; the thread stops with
:meth:`AsynchronousDataAccessor.terminate` or when the accessor is garbage-collected.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.utils.data

from ipupod.poptorch.enums import DataLoaderMode, SharingStrategy
from ipupod.poptorch.options import Options

logger = logging.getLogger("poptorch")

#: How often a waiting side (the worker on a full buffer, the loop on an empty one) looks
#: whether it was told to stop; both wake at once when the other side moves.
_POLL_SECONDS = 0.05
#: How long terminate() waits for the worker to finish the dataset call it is in.
_JOIN_SECONDS = 10.0


# ---------------------------------------------------------------------- options


def _positive_or_none(value: Any, what: str, fix: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, not {value!r}; {fix}")
    return value


def _batches_per_call(options: Options) -> int:
    """Micro-batches one call of the model consumes: deviceIterations x replicas (per input
    group) x gradientAccumulation, PopTorch's DataLoader rule for training and inference."""
    groups = options.replication_factor // getattr(options, "input_group_size", 1)
    return options.device_iterations * groups * options.Training.gradient_accumulation


def _processes(options: Options) -> Tuple[int, int]:
    """(numProcesses, processId) of ``options.Distributed``; one process when the options
    have no ``Distributed``."""
    distributed = getattr(options, "Distributed", None)
    if distributed is None:
        return 1, 0
    count = int(getattr(distributed, "numProcesses", 1))
    index = int(getattr(distributed, "processId", 0))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"Options.Distributed says process {index} of {count}; configure "
                         f"a process id in [0, numProcesses)")
    return count, index


def _random_seed(options: Options) -> Optional[int]:
    seed = getattr(options, "random_seed", None)
    if seed is None:
        seed = getattr(options, "ipu_config", {}).get("seed")
    return None if seed is None else int(seed)


# ---------------------------------------------------------------------- datasets


class _SubDataset(torch.utils.data.Dataset):
    """This process's block of a map-style dataset in a distributed run: every sample of
    process 0, then every sample of process 1, ... With ``drop_last`` each process gets a
    whole number of combined batches and the samples left over are used by shifting the
    blocks every other epoch; without it the samples are spread evenly.

    When shuffling, the whole dataset's indices are permuted with the options' seed (the same
    in every process, so the blocks stay disjoint) at the start of each epoch."""

    def __init__(self, dataset: Any, processes: Tuple[int, int], step: int,
                 drop_last: bool, seed: Optional[int]) -> None:
        count, index = processes
        total = len(dataset)
        if drop_last:
            per_process = step * (total // (step * count))
            if per_process == 0:
                raise ValueError(f"the dataset has {total} samples, fewer than one combined "
                                 f"batch ({step}) for each of {count} processes; use a "
                                 f"smaller batch_size or pass drop_last=False")
            self._offset = index * per_process
            self._length = min(per_process, total - self._offset)
            self._leftovers = total % per_process
        else:
            per_process = [total // count + (total % count > p) for p in range(count)]
            self._offset = sum(per_process[:index])
            self._length = per_process[index]
            self._leftovers = 0
        self._base_offset = self._offset
        self._dataset = dataset
        self._seed = seed
        self._generator_state: Optional[torch.Tensor] = None
        self._shuffled: Optional[torch.Tensor] = None

    def shuffle_global_indices(self) -> None:
        """A new permutation of the whole dataset, the same in every process."""
        generator = torch.Generator()
        if self._generator_state is None:
            generator.manual_seed(self._seed)
        else:
            generator.set_state(self._generator_state)
        shuffled = torch.randperm(len(self._dataset), generator=generator)
        if self._shuffled is None:
            self._shuffled = shuffled.share_memory_()  # seen by persistent torch workers
        else:
            self._shuffled.copy_(shuffled)
        self._generator_state = generator.get_state()

    def checkpoint(self) -> Tuple[Optional[torch.Tensor], int]:
        """The shuffle's state, for :meth:`restore`."""
        state = self._generator_state
        return (None if state is None else state.clone()), self._offset

    def restore(self, checkpoint: Tuple[Optional[torch.Tensor], int]) -> None:
        """Undoes the epochs started since :meth:`checkpoint`."""
        state, self._offset = checkpoint
        self._generator_state = None if state is None else state.clone()

    def swap_range(self) -> None:
        """Every other epoch, the blocks start ``leftovers`` samples later."""
        if self._base_offset == self._offset:
            self._offset += self._leftovers
        else:
            self._offset = self._base_offset

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for this process's {self._length} "
                             f"samples")
        position = index + self._offset
        if self._shuffled is not None:
            position = int(self._shuffled[position])
        return self._dataset[position]


# ---------------------------------------------------------------------- batch structures


def _leaves(data: Any, where: str = "batch") -> List[torch.Tensor]:
    """The tensors of a batch (a tensor, or lists, tuples and dicts of them), in order."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, dict):
        return [t for key, value in data.items() for t in _leaves(value, f"{where}[{key!r}]")]
    if isinstance(data, (list, tuple)):
        return [t for i, value in enumerate(data) for t in _leaves(value, f"{where}[{i}]")]
    raise ValueError(f"{where} is a {type(data).__name__}, not a tensor: batches that are "
                     f"concatenated (AsyncRebatched, a batch_sampler) must hold only tensors "
                     f"in lists, tuples and dicts; convert it in the dataset or a collate_fn")


def _rebuild(template: Any, tensors: Iterator[torch.Tensor]) -> Any:
    """``template``'s structure with the next tensors of ``tensors`` as its leaves."""
    if isinstance(template, torch.Tensor):
        return next(tensors)
    if isinstance(template, dict):
        items = {key: _rebuild(value, tensors) for key, value in template.items()}
        return items if type(template) is dict else type(template)(items)
    items = [_rebuild(value, tensors) for value in template]
    if isinstance(template, tuple):
        return type(template)(*items) if hasattr(template, "_fields") else tuple(items)
    return items


def _rows(batch: Any) -> int:
    first = _leaves(batch)
    if not first or first[0].dim() == 0:
        raise ValueError("a batch to concatenate has no batch dimension (no tensor, or a 0-d "
                         "tensor first); return batched tensors (batch_size >= 1)")
    return int(first[0].shape[0])


def _concat(batches: Sequence[Any]) -> Any:
    """The batches joined along their first dimension, with the first one's structure."""
    if len(batches) == 1:
        return batches[0]
    flat = [_leaves(b) for b in batches]
    if len({len(f) for f in flat}) != 1:
        raise ValueError("the batches to concatenate hold different numbers of tensors; "
                         "every batch must have the same structure")
    return _rebuild(batches[0], iter([torch.cat(parts) for parts in zip(*flat)]))


def _narrow(batch: Any, start: int, length: int) -> Any:
    return _rebuild(batch, iter([t[start:start + length] for t in _leaves(batch)]))


def _combine_batches(batches: Iterator[Any], count: int, drop_last: bool) -> Iterator[Any]:
    """``count`` consecutive batches of a ``batch_sampler`` joined into one; an incomplete
    last group only when not ``drop_last``."""
    group: List[Any] = []
    for batch in batches:
        group.append(batch)
        if len(group) == count:
            yield _concat(group)
            group = []
    if group and not drop_last:
        yield _concat(group)


class _Rebatcher:
    """Cuts and joins the batches it is given into batches of exactly ``size`` rows."""

    def __init__(self, size: int, drop_last: bool) -> None:
        self._size = size
        self._drop_last = drop_last
        self._parts: List[Any] = []
        self._rows = 0

    def add(self, batch: Any) -> List[Any]:
        """The complete batches ``batch`` finishes (rows left over wait for the next)."""
        rows, start, done = _rows(batch), 0, []
        while start < rows:
            take = min(rows - start, self._size - self._rows)
            self._parts.append(batch if take == rows else _narrow(batch, start, take))
            self._rows += take
            start += take
            if self._rows == self._size:
                done.append(self._take())
        return done

    def finish(self) -> List[Any]:
        """The incomplete last batch, unless dropped."""
        last = [self._take()] if self._rows and not self._drop_last else []
        self._parts, self._rows = [], 0
        return last

    def _take(self) -> Any:
        batch = _concat(self._parts)
        self._parts, self._rows = [], 0
        return batch


# ---------------------------------------------------------------------- DataLoader


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` for a model wrapped with ``options``: each iteration
    yields one call's data, ``batch_size`` x deviceIterations x replicationFactor x
    gradientAccumulation samples (:attr:`combinedBatchSize`).

    ``drop_last`` (default True) drops an incomplete last combined batch; with False it is
    returned smaller, and a warning says so. With ``options.Distributed`` over several
    processes and ``auto_distributed_partitioning``, each process reads its own block of a
    map-style dataset (shuffling then needs ``options.randomSeed(n)``, the same ``n`` in every
    process). ``mode`` ``DataLoaderMode.Async`` / ``AsyncRebatched`` reads through an
    :class:`AsynchronousDataAccessor` (``async_options`` are its arguments);
    ``rebatched_worker_size`` is the batch torch's workers return when rebatching (default:
    the combined batch). Other keyword arguments (``collate_fn``, ``worker_init_fn``,
    ``generator``, ``sampler``, ...) go to torch's DataLoader.
    """

    def __init__(self, options: Options, dataset: Any, batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None, num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: Optional[bool] = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync,
                 async_options: Optional[Dict[str, Any]] = None,
                 rebatched_worker_size: Optional[int] = None,
                 batch_sampler: Optional[Iterable[Sequence[int]]] = None,
                 **kwargs: Any) -> None:
        if not isinstance(options, Options):
            raise ValueError(f"poptorch.DataLoader's first argument is the model's "
                             f"poptorch.Options, not a {type(options).__name__}; call "
                             f"poptorch.DataLoader(options, dataset, batch_size=...)")
        try:
            mode = DataLoaderMode(mode)
        except ValueError:
            raise ValueError(f"mode must be a poptorch.DataLoaderMode (Sync, Async or "
                             f"AsyncRebatched), not {mode!r}") from None
        batch_size = _positive_or_none(
            batch_size, "batch_size", "it is the micro-batch size; pass None only to load "
            "samples without batching")
        rebatched_worker_size = _positive_or_none(
            rebatched_worker_size, "rebatched_worker_size",
            "leave it None to rebatch the combined batch")
        if batch_size is None and drop_last and batch_sampler is None:
            raise ValueError("batch_size=None loads the samples one by one, without batches "
                             "to drop: pass drop_last=False with it, or a batch_size")
        processes = _processes(options)
        self._accessor: Optional[AsynchronousDataAccessor] = None
        self._options = options
        self._user_batch_sampler = batch_sampler is not None
        self._shuffle_across_processes = False

        if self._user_batch_sampler:
            if batch_size != 1 or shuffle:
                raise ValueError("batch_sampler is mutually exclusive with batch_size and "
                                 "shuffle: leave them at their defaults, the sampler chooses "
                                 "the batches")
            if processes[0] > 1 and auto_distributed_partitioning:
                raise ValueError("batch_sampler is mutually exclusive with "
                                 "auto_distributed_partitioning=True in a distributed run: "
                                 "pass auto_distributed_partitioning=False and give each "
                                 "process its own sampler")
            batch_size = getattr(batch_sampler, "batch_size", batch_size)
            self._sampler_drop_last = drop_last
            drop_last = False  # torch refuses drop_last with a batch_sampler
        shuffle = bool(shuffle)
        if persistent_workers is None:
            persistent_workers = num_workers > 0

        self._batches_to_combine = _batches_per_call(options)
        self._combined_batch_size = (None if batch_size is None
                                     else batch_size * self._batches_to_combine)
        self._is_iterable = isinstance(dataset, torch.utils.data.IterableDataset)

        if self._is_iterable:
            if auto_distributed_partitioning and processes[0] > 1:
                raise ValueError("auto_distributed_partitioning does not split an "
                                 "IterableDataset: pass auto_distributed_partitioning=False "
                                 "and have each process's dataset yield its own share")
            if num_workers > 1 and "worker_init_fn" not in kwargs:
                logger.warning(
                    "IterableDataset used with num_workers=%d but no worker_init_fn "
                    "specified: as a result the DataLoader will return %d times each element "
                    "in the dataset (see torch.utils.data.IterableDataset's documentation)",
                    num_workers, num_workers)
        else:
            if not drop_last or self._user_batch_sampler:
                self._warn_incomplete_last_batch(dataset, batch_sampler, processes[0])
            if processes[0] > 1 and auto_distributed_partitioning:
                seed = _random_seed(options)
                if shuffle and seed is None:
                    raise ValueError("shuffle=True in a distributed run needs the same order "
                                     "in every process: call options.randomSeed(N) with the "
                                     "same N in every process")
                if self._combined_batch_size is None:
                    raise ValueError("batch_size=None cannot be split over processes: pass a "
                                     "batch_size or auto_distributed_partitioning=False")
                dataset = _SubDataset(dataset, processes, self._combined_batch_size,
                                      drop_last, seed)
                # The whole dataset is shuffled in __iter__; the blocks are not shuffled
                # again inside each process.
                self._shuffle_across_processes = shuffle
                shuffle = False

        rebatched_size: Optional[int] = None
        torch_batch_size = 1 if self._user_batch_sampler else self._combined_batch_size
        real_drop_last = self._sampler_drop_last if self._user_batch_sampler else drop_last
        combined_above_one = (self._combined_batch_size or 0) > 1
        if mode == DataLoaderMode.AsyncRebatched or (
                mode == DataLoaderMode.Async and not real_drop_last and combined_above_one):
            # The accessor builds the combined batches and handles the left-over samples.
            mode = DataLoaderMode.Async
            rebatched_size = self._combined_batch_size
            self.rebatched_drop_last = drop_last
            drop_last = False
            if rebatched_worker_size is not None:
                if rebatched_size is None or rebatched_worker_size > rebatched_size:
                    raise ValueError(f"rebatched_worker_size ({rebatched_worker_size}) must "
                                     f"be at most the combined batch size "
                                     f"({rebatched_size}); pass a smaller one or None")
                torch_batch_size = rebatched_worker_size

        super().__init__(dataset, batch_size=torch_batch_size, shuffle=shuffle,
                         batch_sampler=batch_sampler, num_workers=num_workers,
                         drop_last=drop_last,
                         persistent_workers=persistent_workers, **kwargs)

        if mode == DataLoaderMode.Async:
            async_options = dict(async_options or {})
            if "rebatched_size" in async_options:
                raise ValueError("async_options cannot set rebatched_size: "
                                 "DataLoaderMode.AsyncRebatched sets it to the combined batch "
                                 "size (choose the workers' batch with rebatched_worker_size)")
            self._accessor = AsynchronousDataAccessor(self, **async_options,
                                                      rebatched_size=rebatched_size)
            self._accessor._owned_by(self)

    def _warn_incomplete_last_batch(self, dataset: Any, batch_sampler: Any,
                                    processes: int) -> None:
        """PopTorch's warning when drop_last=False leaves a smaller last batch."""
        if self._user_batch_sampler:
            if self._sampler_drop_last:
                return
            batches = _sized(batch_sampler)
            if batches is None:
                logger.warning(
                    "The batch_sampler has no __len__ and drop_last=False: the last tensor "
                    "may have fewer than %d batches; pass drop_last=True to avoid handling "
                    "this case", self._batches_to_combine)
            elif batches % self._batches_to_combine:
                logger.warning(
                    "The batch_sampler gives %d batches, not a multiple of the %d batches "
                    "processed per step, and drop_last=False: the last tensor will have %d "
                    "batches; pass drop_last=True to avoid handling this case", batches,
                    self._batches_to_combine, batches % self._batches_to_combine)
            return
        step = self._combined_batch_size
        if step is not None and len(dataset) % (step * processes):
            logger.warning(
                "The number of elements in the dataset (%d) is not divisible by the number of "
                "elements processed per step (%d) and drop_last=False. The last tensor will "
                "have a batch size of %d. To avoid having to handle this special case switch "
                "to drop_last=True", len(dataset), step * processes,
                len(dataset) % (step * processes))

    # ------------------------------------------------------------------ PopTorch's API

    @property
    def combinedBatchSize(self) -> Optional[int]:  # noqa: N802 - PopTorch's name
        """Samples one call of the model consumes: batch_size x deviceIterations x
        replicationFactor x gradientAccumulation (None when batch_size is None)."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        """The options this loader was made with."""
        return self._options

    def terminate(self) -> None:
        """Stops the accessor's loading thread (Async modes); nothing otherwise."""
        if self._accessor is not None:
            self._accessor.terminate()

    def __len__(self) -> int:
        accessor = self._accessor
        if accessor is not None and accessor.rebatched_size:
            samples = len(self.dataset)
            batches = samples // accessor.rebatched_size
            if not self.rebatched_drop_last and samples % accessor.rebatched_size:
                batches += 1
            return batches
        if self._user_batch_sampler and self._batches_to_combine != 1:
            batches = super().__len__()
            whole = batches // self._batches_to_combine
            return whole + (0 if self._sampler_drop_last or
                            not batches % self._batches_to_combine else 1)
        return super().__len__()

    def __iter__(self) -> Any:
        if self._accessor is not None:
            return iter(self._accessor)
        return self._sync_iter()

    def _epoch_checkpoint(self) -> Any:
        """What starting an epoch changes in this loader (the distributed shuffle's state)."""
        if self._shuffle_across_processes:
            return self.dataset.checkpoint()
        return None

    def _epoch_restore(self, checkpoint: Any) -> None:
        if checkpoint is not None:
            self.dataset.restore(checkpoint)

    def _sync_iter(self) -> Iterator[Any]:
        """One epoch read in the calling thread (Sync; the accessor's source of batches)."""
        if self._shuffle_across_processes:
            self.dataset.shuffle_global_indices()
            self.dataset.swap_range()
        batches = super().__iter__()
        if self._user_batch_sampler and self._batches_to_combine != 1:
            return _combine_batches(batches, self._batches_to_combine, self._sampler_drop_last)
        return batches


def _sized(batch_sampler: Any) -> Optional[int]:
    try:
        length = len(batch_sampler)
    except (TypeError, NotImplementedError):
        return None
    return None if length is NotImplemented else length


# ---------------------------------------------------------------------- the accessor


_DATA, _END, _ERROR = "data", "end", "error"


class _Epoch:
    """One pass over the source, handed to the worker thread. The iterator was made in the
    iterating thread; ``prefix`` holds what that thread already read from it."""

    def __init__(self, number: int, iterator: Optional[Iterator[Any]],
                 prefix: List[Tuple[str, Any]], checkpoint: Any) -> None:
        self.number = number
        self.iterator = iterator
        self.prefix = prefix
        self.cancelled = False
        self.done = threading.Event()
        self.fresh = True  # nothing taken from it yet
        self.checkpoint = checkpoint  # the source's state before this epoch started
        # Loaded ahead (load_indefinitely, early_preload): the random generators' states
        # just after its draws, which an iter() that finds them changed makes again.
        self.rng_after: Optional[List[torch.Tensor]] = None


class _Shared:
    """What the iterating thread and the worker thread share (never the accessor itself,
    so that the accessor can be garbage-collected while the worker waits)."""

    def __init__(self, buffer_size: int, rebatched_size: Optional[int],
                 rebatched_drop_last: bool) -> None:
        self.ready: "queue.Queue[Tuple[int, str, Any]]" = queue.Queue(maxsize=buffer_size)
        self.epochs: "queue.Queue[_Epoch]" = queue.Queue()
        self.stop = threading.Event()
        self.rebatched_size = rebatched_size
        self.rebatched_drop_last = rebatched_drop_last


def _stop(shared: _Shared) -> None:
    shared.stop.set()


def _worker(shared: _Shared) -> None:
    """The loading thread: runs each epoch it is given until the end, a cancel or a stop."""
    while not shared.stop.is_set():
        try:
            epoch = shared.epochs.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
        try:
            _load(shared, epoch)
        finally:
            epoch.iterator, epoch.prefix = None, []
            epoch.done.set()
            del epoch


def _put(shared: _Shared, epoch: _Epoch, kind: str, payload: Any = None) -> bool:
    """Waits for a free slot in the buffer; False when the epoch was cancelled or the
    accessor stopped meanwhile."""
    while not (shared.stop.is_set() or epoch.cancelled):
        try:
            shared.ready.put((epoch.number, kind, payload), timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            pass
    return False


def _load(shared: _Shared, epoch: _Epoch) -> None:
    rebatcher = (_Rebatcher(shared.rebatched_size, shared.rebatched_drop_last)
                 if shared.rebatched_size else None)

    def emit(batch: Any) -> bool:
        if rebatcher is None:
            return _put(shared, epoch, _DATA, batch)
        return all(_put(shared, epoch, _DATA, b) for b in rebatcher.add(batch))

    try:
        for kind, payload in epoch.prefix:
            if kind == _ERROR:
                _put(shared, epoch, _ERROR, payload)
                return
            if kind == _DATA and not emit(payload):
                return
        if not any(kind == _END for kind, _ in epoch.prefix):
            while True:
                if shared.stop.is_set() or epoch.cancelled:
                    return
                try:
                    batch = next(epoch.iterator)
                except StopIteration:
                    break
                if not emit(batch):
                    return
        for batch in rebatcher.finish() if rebatcher is not None else []:
            if not _put(shared, epoch, _DATA, batch):
                return
        _put(shared, epoch, _END)
    except Exception as error:  # noqa: BLE001 - the dataset's, raised in the iterating loop
        _put(shared, epoch, _ERROR, error)


class AsynchronousDataAccessor:
    """Loads batches from ``dataset`` (a :class:`DataLoader` or any iterable) ahead of the
    loop that iterates it, in a background thread, up to ``buffer_size`` batches ahead.

    It yields what iterating ``dataset`` yields, in the same order, epoch after epoch
    (``for batch in accessor`` again starts the next epoch; stopping early and iterating again
    starts a fresh one). With ``load_indefinitely`` (default) the next epoch is loaded as
    soon as one ends; ``early_preload`` starts loading at construction instead of at the
    first iteration. ``rebatched_size`` joins and cuts the batches into batches of that many
    rows. ``miss_sleep_time_in_ms`` and ``sharing_strategy`` are accepted: the thread wakes
    as soon as a slot frees and shares the dataset as it is. An exception of the dataset is
    raised by the loop's ``next``; :meth:`terminate` (or garbage collection) stops the
    thread.
    """

    def __init__(self, dataset: Any, buffer_size: int = 3,
                 miss_sleep_time_in_ms: float = 0.1, load_indefinitely: bool = True,
                 early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
                 rebatched_size: Optional[int] = None) -> None:
        self._thread: Optional[threading.Thread] = None
        if isinstance(dataset, DataLoader) and dataset._accessor is not None:
            raise ValueError("this DataLoader already reads through an "
                             "AsynchronousDataAccessor (its mode is Async): iterate the "
                             "DataLoader itself, or make it with mode=DataLoaderMode.Sync")
        if (isinstance(dataset, DataLoader) and not dataset._user_batch_sampler
                and not dataset.drop_last and rebatched_size is None
                and (dataset.combinedBatchSize or 1) > 1):
            raise ValueError("a DataLoader with drop_last=False needs rebatched_size here "
                             "(its last batch is smaller): make the DataLoader with "
                             "mode=DataLoaderMode.Async, which handles it, or pass "
                             "drop_last=True")
        buffer_size = _positive_or_none(buffer_size, "buffer_size",
                                        "it is how many batches are loaded ahead")
        if buffer_size is None:
            raise ValueError("buffer_size must be a positive integer, not None")
        if rebatched_size is not None and (isinstance(rebatched_size, bool) or
                                           not isinstance(rebatched_size, int) or
                                           rebatched_size <= 1):
            raise ValueError(f"rebatched_size must be None or an integer greater than 1, not "
                             f"{rebatched_size!r}")
        if not (hasattr(dataset, "__iter__") or hasattr(dataset, "__getitem__")):
            raise ValueError(f"AsynchronousDataAccessor reads an iterable (a "
                             f"poptorch.DataLoader, a torch DataLoader, ...), not a "
                             f"{type(dataset).__name__}")
        SharingStrategy(sharing_strategy)  # PopTorch's values only
        float(miss_sleep_time_in_ms)
        self._strong_source: Any = dataset
        self._weak_source: Optional["weakref.ReferenceType[Any]"] = None
        self.rebatched_size = rebatched_size
        self._load_indefinitely = bool(load_indefinitely)
        self._shared = _Shared(buffer_size, rebatched_size,
                               bool(getattr(dataset, "rebatched_drop_last", True)))
        self._epoch: Optional[_Epoch] = None
        self._epochs_started = 0
        self._exhausted = False
        self._terminated = False
        self._thread = threading.Thread(target=_worker, args=(self._shared,),
                                        name="poptorch.AsynchronousDataAccessor", daemon=True)
        self._finalizer = weakref.finalize(self, _stop, self._shared)
        self._thread.start()
        if early_preload:
            self._start_epoch(ahead=True)

    # ------------------------------------------------------------------ iterating

    def __iter__(self) -> "AsynchronousDataAccessor":
        self._check_alive()
        epoch = self._epoch
        if epoch is not None and epoch.fresh and epoch.rng_after is not None and \
                not _same_states(epoch.rng_after, _rng_states(self._source)):
            # Loaded ahead, but the script reseeded torch since: draw again, as Sync would.
            self._cancel_epoch()
            if isinstance(self._source, DataLoader):
                self._source._epoch_restore(epoch.checkpoint)
            epoch = None
        if epoch is None or not epoch.fresh:
            self._start_epoch()
        self._exhausted = False
        return self

    def __next__(self) -> Any:
        self._check_alive()
        if self._epoch is None:
            self._start_epoch()
            self._exhausted = False
        if self._exhausted:
            raise StopIteration
        epoch = self._epoch
        epoch.fresh = False
        while True:
            try:
                number, kind, payload = self._shared.ready.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self._check_alive()
                if not self._thread.is_alive():
                    raise RuntimeError("the AsynchronousDataAccessor's loading thread "
                                       "stopped; create a new accessor") from None
                continue
            if number != epoch.number:
                continue  # left from an epoch that was cancelled
            if kind == _DATA:
                return payload
            self._exhausted = True
            if kind == _ERROR:
                error, payload = payload, None
                try:
                    raise error
                finally:  # no cycle through this frame: the error may hold torch's workers
                    del error
            if self._load_indefinitely:
                self._start_epoch(ahead=True)  # loaded while the loop goes on
            raise StopIteration

    def __len__(self) -> int:
        length = len(self._source)
        if self.rebatched_size and getattr(self._source, "_accessor", None) is not self:
            samples = length * (getattr(self._source, "batch_size", None) or 1)
            length = samples // self.rebatched_size
        return length

    def terminate(self) -> None:
        """Stops the loading thread (waiting up to 10 s for a dataset call it is in)."""
        self._terminated = True
        if self._thread is None:
            return
        self._finalizer()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_JOIN_SECONDS)
        self._epoch = None
        _drain(self._shared.ready)

    # ------------------------------------------------------------------ epochs

    @property
    def _source(self) -> Any:
        if self._weak_source is not None:
            source = self._weak_source()
            if source is None:
                raise RuntimeError("the DataLoader of this AsynchronousDataAccessor is gone")
            return source
        return self._strong_source

    def _owned_by(self, loader: "DataLoader") -> None:
        """The loader that made this accessor holds it: refer to the loader weakly, so that
        dropping the loader frees both by reference counting. (A cycle would leave them to
        the cyclic collector, which closes the queues of torch's persistent workers before
        it shuts the workers down, and then waits for them.)"""
        self._weak_source, self._strong_source = weakref.ref(loader), None

    def _check_alive(self) -> None:
        if self._terminated:
            raise RuntimeError("this AsynchronousDataAccessor was terminated; create a new "
                               "one (or a new poptorch.DataLoader) to load again")

    def _start_epoch(self, ahead: bool = False) -> None:
        """Cancels the current epoch, then starts the next: its iterator (and so the random
        draws of a shuffling sampler) is made here, in the iterating thread."""
        self._cancel_epoch()
        self._epochs_started += 1
        checkpoint = (self._source._epoch_checkpoint()
                      if isinstance(self._source, DataLoader) else None)
        rng_before = _rng_states(self._source) if ahead else None
        iterator: Optional[Iterator[Any]] = None
        prefix: List[Tuple[str, Any]] = []
        try:
            if isinstance(self._source, DataLoader):
                iterator = iter(self._source._sync_iter())
            else:
                iterator = iter(self._source)
            if _draws_lazily(self._source):
                # torch's single-process loader draws its sampler's seed at the first next():
                # take it here, where a Sync loop takes it.
                try:
                    prefix.append((_DATA, next(iterator)))
                except StopIteration:
                    prefix.append((_END, None))
        except Exception as error:  # noqa: BLE001 - raised by the loop's next()
            prefix.append((_ERROR, error))
        self._epoch = _Epoch(self._epochs_started, iterator, prefix, checkpoint)
        if rng_before is not None:
            rng_after = _rng_states(self._source)
            if not _same_states(rng_before, rng_after):  # else nothing depends on them
                self._epoch.rng_after = rng_after
        self._shared.epochs.put(self._epoch)

    def _cancel_epoch(self) -> None:
        epoch = self._epoch
        if epoch is None:
            return
        epoch.cancelled = True
        # The worker leaves the epoch at its next batch boundary (a dataset call it is in
        # finishes first, as it would in a Sync loop).
        while not epoch.done.wait(_POLL_SECONDS):
            if not self._thread.is_alive():
                break
        self._epoch = None
        _drain(self._shared.ready)


def _drain(ready: "queue.Queue[Any]") -> None:
    while True:
        try:
            ready.get_nowait()
        except queue.Empty:
            return


def _rng_states(source: Any) -> List[torch.Tensor]:
    """The states of the random generators an epoch of ``source`` draws from."""
    states = [torch.get_rng_state()]
    generator = getattr(source, "generator", None)
    if isinstance(generator, torch.Generator):
        states.append(generator.get_state())
    return states


def _same_states(a: List[torch.Tensor], b: List[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _draws_lazily(source: Any) -> bool:
    """Whether the first batch of ``source`` must be read in the iterating thread: a
    single-process torch loader whose sampling (or iterable dataset) may draw from torch's
    global random generator when its first batch is read."""
    if not isinstance(source, torch.utils.data.DataLoader) or source.num_workers > 0:
        return False
    if isinstance(source.dataset, torch.utils.data.IterableDataset):
        return True
    sampler = source.batch_sampler if source.batch_sampler is not None else source.sampler
    if isinstance(sampler, torch.utils.data.BatchSampler):
        sampler = sampler.sampler
    return not isinstance(sampler, torch.utils.data.SequentialSampler)


__all__ = ["AsynchronousDataAccessor", "DataLoader", "DataLoaderMode", "SharingStrategy"]

