"""eager.utils.data: datasets, samplers, collation and DataLoader, in the main process
and in worker processes, against PyTorch's torch.utils.data where it is installed."""
import collections
import os
import time

import numpy as np
import pytest

import eager
from eager.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset,
                              IterableDataset, RandomSampler, SequentialSampler, Subset,
                              SubsetRandomSampler, TensorDataset, WeightedRandomSampler,
                              default_collate, get_worker_info, random_split)
from tests.processes import reads_proc, running


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _arrays(n=7):
    return np.arange(n * 3, dtype=np.float32).reshape(n, 3), np.arange(n) % 3


def _values(batches):
    """Batches as nested lists of Python numbers (from kiln's or torch's tensors)."""
    def plain(x):
        if hasattr(x, "tolist"):
            return x.tolist()
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x
    return [plain(b) for b in batches]


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": float(i), "square": i * i, "name": f"item{i}"}

    def __len__(self):
        return self.n


class Stream(IterableDataset):
    """0..n-1, each worker its own slice (every num_workers-th item)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


# datasets --------------------------------------------------------------------------------
def test_a_tensor_dataset_gives_each_tensors_row_and_checks_their_first_dims():
    x, y = _arrays()
    data = TensorDataset(eager.tensor(x), eager.tensor(y))
    assert len(data) == 7
    row, label = data[3]
    assert row.tolist() == x[3].tolist() and label.item() == y[3]
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(eager.zeros(3, 2), eager.zeros(4))
    with pytest.raises(TypeError, match="TensorDataset takes tensors"):
        TensorDataset(x)


def test_subsets_and_concatenations_index_their_parts():
    data = Squares(5) + Squares(3)
    assert isinstance(data, ConcatDataset) and len(data) == 8
    assert data[6]["square"] == 1 and data[-1]["square"] == 4
    with pytest.raises(IndexError):
        data[8]
    part = Subset(Squares(10), [9, 2, 4])
    assert len(part) == 3 and [part[i]["square"] for i in range(3)] == [81, 4, 16]


@pytest.mark.parametrize("n, lengths", [(10, [3, 7]), (11, [0.5, 0.5]), (10, [0.33, 0.33, 0.34]),
                                        (7, [0.1, 0.9])])
def test_random_split_gives_disjoint_subsets_of_torchs_sizes(n, lengths):
    parts = random_split(range(n), lengths, generator=eager.Generator().manual_seed(0))
    torch = _torch()
    expected = torch.utils.data.random_split(range(n), lengths,
                                             generator=torch.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [len(p) for p in expected]
    assert sorted(i for p in parts for i in p) == list(range(n))


def test_random_split_repeats_with_its_seed_and_refuses_wrong_lengths():
    def split(seed):
        return [list(p) for p in random_split(range(9), [4, 5],
                                              generator=eager.Generator().manual_seed(seed))]
    assert split(1) == split(1) != split(2)
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        random_split(range(9), [4, 4])


# samplers --------------------------------------------------------------------------------
def test_samplers_give_the_indices_they_promise():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    shuffled = list(RandomSampler(range(20), generator=eager.Generator().manual_seed(3)))
    assert sorted(shuffled) == list(range(20)) and shuffled != list(range(20))
    drawn = list(RandomSampler(range(4), replacement=True, num_samples=50))
    assert len(drawn) == 50 and set(drawn) <= set(range(4))
    more = list(RandomSampler(range(4), num_samples=10))
    assert len(more) == 10 and sorted(more[:8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sorted(SubsetRandomSampler([5, 7, 9])) == [5, 7, 9]
    weighted = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 200))
    assert set(weighted) == {1, 3} and weighted.count(3) > weighted.count(1)
    assert sorted(WeightedRandomSampler([1, 1, 0, 1], 3, replacement=False)) == [0, 1, 3]
    batches = BatchSampler(SequentialSampler(range(7)), 3, drop_last=False)
    assert list(batches) == [[0, 1, 2], [3, 4, 5], [6]] and len(batches) == 3
    assert len(BatchSampler(range(7), 3, drop_last=True)) == 2


def test_a_random_sampler_with_replacement_draws_lazily_however_many_samples_it_promises():
    """PyTorch draws 32 at a time: num_samples=10**10 (an epoch length some programs set)
    allocated every index at once, 74.5 GiB."""
    import itertools
    import tracemalloc
    sampler = RandomSampler(range(10), replacement=True, num_samples=10 ** 10)
    assert len(sampler) == 10 ** 10
    tracemalloc.start()
    try:
        first = list(itertools.islice(RandomSampler(range(10), replacement=True,
                                                    num_samples=10 ** 7), 100))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes to draw 100 of 10**7 samples"
    assert len(first) == 100 and set(first) <= set(range(10))
    assert next(iter(sampler)) in range(10)
    assert len(list(RandomSampler(range(3), replacement=True, num_samples=70))) == 70


def test_samplers_refuse_bad_arguments_by_name():
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(3), 0, False)
    with pytest.raises(RuntimeError, match="cannot draw 3 samples without replacement"):
        WeightedRandomSampler([1, 0, 1], 3, replacement=False)
    with pytest.raises(ValueError, match="weights should be a 1d sequence"):
        WeightedRandomSampler([[1, 2]], 1)


def test_an_unseeded_shuffle_repeats_after_manual_seed():
    def order():
        return list(RandomSampler(range(30)))
    eager.manual_seed(5)
    first = order()
    eager.manual_seed(5)
    assert order() == first


# collation -------------------------------------------------------------------------------
def test_default_collate_batches_like_torchs():
    Point = collections.namedtuple("Point", "x y")
    samples = [({"a": np.float32(i), "b": [i, float(i)], "s": str(i)}, Point(i, 2.5 * i),
                np.full(2, i, np.float64), i % 2 == 0) for i in range(3)]
    ours = default_collate(samples)
    assert isinstance(ours, list) and isinstance(ours[1], Point)
    assert ours[0]["a"].dtype == eager.float32 and ours[0]["b"][1].dtype == eager.float64
    assert ours[0]["b"][0].dtype == eager.int64 and ours[3].dtype == eager.bool
    assert ours[2].shape == (3, 2) and ours[0]["s"] == ["0", "1", "2"]
    torch = _torch()
    theirs = torch.utils.data.default_collate(samples)
    assert _values([ours]) == _values([theirs])
    assert str(ours[0]["b"][1].dtype).split(".")[-1] == str(theirs[0]["b"][1].dtype).split(".")[-1]


def test_default_collate_names_what_it_cannot_batch():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="batch must contain tensors, numpy arrays, numbers"):
        default_collate([object(), object()])


# DataLoader in the main process ----------------------------------------------------------
@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (3, True), (7, False),
                                                   (10, True)])
def test_batches_in_order_equal_torchs(batch_size, drop_last):
    x, y = _arrays()
    ours = DataLoader(TensorDataset(eager.tensor(x), eager.tensor(y)), batch_size=batch_size,
                      drop_last=drop_last)
    torch = _torch()
    theirs = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)),
        batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert _values(ours) == _values(theirs)


def test_a_seeded_shuffle_covers_every_sample_once_per_epoch_and_repeats_with_the_seed():
    data = TensorDataset(eager.arange(10))

    def epochs(seed, count=2):
        loader = DataLoader(data, batch_size=4, shuffle=True,
                            generator=eager.Generator().manual_seed(seed))
        return [[i for (b,) in loader for i in b.tolist()] for _ in range(count)]
    first, second = epochs(0)
    assert sorted(first) == sorted(second) == list(range(10)) and first != second
    assert epochs(0) == [first, second] and epochs(1)[0] != first


def test_dicts_strings_and_no_automatic_batching():
    batches = list(DataLoader(Squares(5), batch_size=2))
    assert batches[0]["name"] == ["item0", "item1"] and batches[2]["square"].tolist() == [16]
    assert batches[1]["x"].dtype == eager.float64
    single = list(DataLoader(Squares(3), batch_size=None))
    assert [s["square"] for s in single] == [0, 1, 4]  # samples as they are, no batch dim
    by_sampler = list(DataLoader(Squares(6), batch_sampler=[[5, 0], [2]]))
    assert [b["square"].tolist() for b in by_sampler] == [[25, 0], [4]]
    custom = DataLoader(Squares(4), batch_size=2, collate_fn=lambda items: len(items))
    assert list(custom) == [2, 2]


def test_an_iterable_dataset_is_batched_from_its_stream():
    assert _values(DataLoader(Stream(10), batch_size=4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert _values(DataLoader(Stream(10), batch_size=4, drop_last=True)) == [[0, 1, 2, 3],
                                                                              [4, 5, 6, 7]]
    assert _values(DataLoader(Stream(3), batch_size=None)) == [0, 1, 2]
    with pytest.raises(TypeError):
        len(DataLoader(Stream(3)))


def test_option_clashes_are_refused_with_torchs_words():
    data = Squares(4)
    cases = [
        (dict(sampler=SequentialSampler(data), shuffle=True), "mutually exclusive with shuffle"),
        (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually exclusive"),
        (dict(batch_size=None, drop_last=True), "disables auto-batching"),
        (dict(num_workers=-1), "num_workers option should be non-negative"),
        (dict(prefetch_factor=2), "prefetch_factor option could only be specified"),
        (dict(persistent_workers=True), "persistent_workers option needs num_workers > 0"),
        (dict(timeout=-1), "timeout option should be non-negative"),
    ]
    for options, words in cases:
        with pytest.raises(ValueError, match=words):
            DataLoader(data, **options)
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Stream(3), shuffle=True)
    with pytest.warns(UserWarning, match="pin_memory"):
        DataLoader(data, pin_memory=True)


# DataLoader with worker processes --------------------------------------------------------
def test_workers_give_the_same_batches_in_the_same_order_as_the_main_process():
    x, y = _arrays(23)
    data = TensorDataset(eager.tensor(x), eager.tensor(y))

    def run(workers):
        loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=workers,
                            generator=eager.Generator().manual_seed(7))
        return _values(loader)
    assert run(2) == run(0)
    assert _values(DataLoader(Squares(9), batch_size=2, num_workers=3)) == \
        _values(DataLoader(Squares(9), batch_size=2))


def test_iterable_workers_interleave_their_streams_as_torchs_do():
    ours = _values(DataLoader(Stream(10), batch_size=3, num_workers=2))
    assert ours == [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]
    torch = _torch()

    class TorchStream(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            return iter(range(info.id, 10, info.num_workers))
    assert ours == _values(torch.utils.data.DataLoader(TorchStream(), batch_size=3,
                                                       num_workers=2))


def _note_worker(worker_id):
    info = get_worker_info()
    assert info.id == worker_id and info.num_workers == 2
    np.save(f"{os.environ['KILN_TEST_NOTES']}/{worker_id}.npy",
            np.array([info.seed, eager.initial_seed()]))


def test_worker_init_fn_runs_in_each_worker_with_its_info_and_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_TEST_NOTES", str(tmp_path))
    assert get_worker_info() is None
    list(DataLoader(Squares(4), batch_size=1, num_workers=2, worker_init_fn=_note_worker))
    seeds = [np.load(tmp_path / f"{i}.npy") for i in range(2)]
    assert all(s[0] == s[1] for s in seeds)  # the worker's generator is seeded with its seed
    assert seeds[1][0] == seeds[0][0] + 1


class Failing(Dataset):
    def __getitem__(self, i):
        if i == 3:
            raise ValueError("sample 3 is broken")
        return i

    def __len__(self):
        return 6


def test_an_error_in_a_worker_is_raised_in_the_main_process_with_its_traceback():
    with pytest.raises(ValueError) as caught:
        list(DataLoader(Failing(), batch_size=2, num_workers=2))
    text = str(caught.value)
    assert "Caught ValueError in DataLoader worker process 1" in text
    assert "sample 3 is broken" in text and "Traceback" in text


class Dying(Dataset):
    def __getitem__(self, i):
        os._exit(3)

    def __len__(self):
        return 2


def test_a_worker_that_dies_is_an_error_naming_it_not_a_hang():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+.*exited "
                                           r"unexpectedly \(exit code 3"):
        list(DataLoader(Dying(), num_workers=1))


class Slow(Dataset):
    def __getitem__(self, i):
        time.sleep(30)
        return i

    def __len__(self):
        return 1


def test_timeout_is_an_error_when_no_batch_comes():
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.3 seconds"):
        list(DataLoader(Slow(), num_workers=1, timeout=0.3))


def test_persistent_workers_serve_every_epoch_and_restart_iterable_streams():
    loader = DataLoader(Stream(7), batch_size=2, num_workers=2, persistent_workers=True)
    first = _values(loader)
    processes = list(loader._workers.processes)
    assert _values(loader) == first == [[0, 2], [1, 3], [4, 6], [5]]
    assert loader._workers.processes == processes and all(p.is_alive() for p in processes)
    partial = iter(loader)
    next(partial)  # an epoch left unfinished: its answers are not the next epoch's
    assert _values(loader) == first
    loader._workers.close()


def test_workers_started_by_spawn_say_that_kiln_tensors_are_not_pickled():
    data = TensorDataset(eager.zeros(2))
    with pytest.raises(RuntimeError, match="kiln tensors are not pickled"):
        list(DataLoader(data, num_workers=1, multiprocessing_context="spawn"))


PARENT = """
import os, sys, time
import eager
from eager.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(eager.arange(100.0)), num_workers=2)
batches = iter(loader)
next(batches)  # the workers are started and have answered what was asked of them
print(*(p.pid for p in loader._workers.processes), flush=True)
if sys.argv[1] == "exits":
    os._exit(0)  # no atexit, no multiprocessing clean-up
time.sleep(600)
"""


@reads_proc
@pytest.mark.parametrize("parent_ends", ["killed", "exits"])
def test_workers_exit_when_their_parent_process_is_gone(parent_ends):
    import signal
    import subprocess
    import sys
    parent = subprocess.Popen([sys.executable, "-c", PARENT, parent_ends],
                              stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2
        if parent_ends == "killed":
            parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=60)
        deadline = time.monotonic() + 30  # generous: they look every second or so
        while any(running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(running(pid) for pid in workers)
    finally:
        parent.kill()
        parent.wait()
        for pid in workers:  # the ones a failure left behind
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_chained_and_stacked_datasets():
    from eager.utils.data import ChainDataset, StackDataset
    chained = ChainDataset([Stream(3), Stream(2)])
    assert list(chained) == [0, 1, 2, 0, 1]
    stacked = StackDataset(Squares(3), TensorDataset(eager.arange(3)))
    assert stacked[2][0]["square"] == 4 and stacked[2][1][0].item() == 2 and len(stacked) == 3
    named = StackDataset(a=Squares(2), b=[10, 11])
    assert named[1] == {"a": Squares(2)[1], "b": 11}
    with pytest.raises(ValueError, match="Size mismatch between datasets"):
        StackDataset(Squares(2), Squares(3))
    with pytest.raises(TypeError, match="ChainDataset only supports IterableDataset"):
        ChainDataset([Squares(2)])


def test_importing_eager_does_not_load_multiprocessing():
    """Workers are started rarely; `import eager` stays light (the DataLoader imports
    multiprocessing when it makes them)."""
    import subprocess
    import sys
    code = "import sys, eager; print('multiprocessing' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


def test_dataset_sampler_and_dataloader_are_generic_as_pytorchs():
    """`class Images(Dataset[Tensor])` and `Sampler[int]` annotations, as libraries write."""
    from eager.utils.data import Sampler

    class Squares(Dataset[int]):
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 4

    assert Dataset[int] is not None and IterableDataset[str] is not None
    assert Subset[int] is not None and Sampler[int] is not None and DataLoader[int] is not None
    assert isinstance(Squares(), Dataset) and Squares()[3] == 9
    assert list(SequentialSampler(range(3))) == [0, 1, 2]
    assert issubclass(TensorDataset, Dataset) and isinstance(SequentialSampler([]), Sampler)
    assert [int(b) for b in DataLoader(Squares(), batch_size=None)] == [0, 1, 4, 9]
