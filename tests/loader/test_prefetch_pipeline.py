"""The prefetch pipeline on real worker threads: order, overlap, errors, early exit."""

from __future__ import annotations

import random
import threading
import time

import pytest

from pyg_dist.errors import LoaderError
from pyg_dist.loader.prefetch import PrefetchPipeline


def _pipeline_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_results_come_in_order_whatever_order_workers_finish():
    rng = random.Random(0)
    delays = [rng.uniform(0, 0.01) for _ in range(50)]

    def produce(i: int) -> int:
        time.sleep(delays[i])  # the behaviour: workers finish out of order
        return i * i

    out = list(PrefetchPipeline(produce, depth=4, name="t-order")(range(50)))
    assert out == [i * i for i in range(50)]
    assert _pipeline_threads("t-order") == []


def test_depth_items_are_in_flight_at_once():
    lock = threading.Lock()
    running = 0
    peak = 0
    depth_reached = threading.Event()
    release = threading.Event()

    def produce(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            if running == 3:
                depth_reached.set()
        release.wait(timeout=10)
        with lock:
            running -= 1
        return i

    def release_at_depth() -> None:
        depth_reached.wait(timeout=10)
        # Asserting an absence: a pipeline that ignored its depth would
        # start a fourth item in this window (the consumer is blocked on the
        # first, so nothing else limits it).
        time.sleep(0.1)
        release.set()

    it = PrefetchPipeline(produce, depth=3, name="t-depth")(range(10))
    releaser = threading.Thread(target=release_at_depth, daemon=True)
    releaser.start()
    try:
        assert next(it) == 0
        assert depth_reached.is_set(), "fewer than 3 items were ever in flight at once"
        assert peak == 3
        assert list(it) == list(range(1, 10))
    finally:
        release.set()
        it.close()
        releaser.join(10)


def test_error_surfaces_at_the_batch_it_belongs_to():
    class Boom(RuntimeError):
        pass

    def produce(i: int) -> int:
        if i == 5:
            raise Boom("sampling failed")
        return i

    got = []
    with pytest.raises(Boom, match="sampling failed") as info:
        for x in PrefetchPipeline(produce, depth=3, name="t-err")(range(10)):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert any("batch 5" in note for note in getattr(info.value, "__notes__", []))
    assert _pipeline_threads("t-err") == []


def test_break_leaves_no_thread_and_no_work_behind():
    started = []
    finished = []
    lock = threading.Lock()

    def produce(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.02)  # the behaviour: items still running when the loop breaks
        with lock:
            finished.append(i)
        return i

    for x in PrefetchPipeline(produce, depth=4, name="t-break")(range(1000)):
        if x == 3:
            break
    # The generator is closed as soon as the loop drops it: every started
    # item has finished, nothing else was started, and no worker is alive.
    assert sorted(started) == sorted(finished)
    assert len(started) <= 3 + 1 + 4
    assert _pipeline_threads("t-break") == []


@pytest.mark.parametrize("depth", [0, -1, 1.5])
def test_bad_depth_is_a_typed_error(depth):
    with pytest.raises(LoaderError, match="prefetch depth"):
        PrefetchPipeline(lambda i: i, depth=depth)


def test_workers_follow_the_consumers_grad_mode():
    # A batch carrying learnable rows (a DistEmbedding's) must record no
    # autograd graph on the workers when the epoch runs under no_grad.
    import torch

    weight = torch.ones(3, requires_grad=True)
    pipeline = PrefetchPipeline(lambda i: weight * i, depth=2)
    with torch.no_grad():
        evaluated = list(pipeline(range(6)))
    assert [t.requires_grad for t in evaluated] == [False] * 6
    trained = list(pipeline(range(6)))
    assert all(t.requires_grad and t.grad_fn is not None for t in trained)


def _thread_count_of_a_new_thread() -> int:
    import torch

    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


def test_loader_threads_one_runs_worker_ops_on_one_thread_only(monkeypatch):
    import torch

    monkeypatch.setenv("PYG_DIST_LOADER_THREADS", "1")
    before = torch.get_num_threads()
    pipeline = PrefetchPipeline(lambda i: (torch.get_num_threads(), torch.get_num_threads()),
                                depth=3)
    during = []
    for worker_count, _ in pipeline(range(5)):
        during.append(torch.get_num_threads())
        assert worker_count == 1
    assert during == [before] * 5
    assert torch.get_num_threads() == before
    assert _thread_count_of_a_new_thread() == before  # the process default restored


@pytest.mark.parametrize("value", [None, "0"])
def test_by_default_workers_keep_the_process_count(monkeypatch, value):
    import torch

    if value is None:
        monkeypatch.delenv("PYG_DIST_LOADER_THREADS", raising=False)
    else:
        monkeypatch.setenv("PYG_DIST_LOADER_THREADS", value)
    counts = list(PrefetchPipeline(lambda i: torch.get_num_threads(), depth=2)(range(3)))
    assert counts == [torch.get_num_threads()] * 3


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_bad_loader_threads_is_a_typed_error(monkeypatch, value):
    monkeypatch.setenv("PYG_DIST_LOADER_THREADS", value)
    with pytest.raises(LoaderError, match="PYG_DIST_LOADER_THREADS must be an integer"):
        list(PrefetchPipeline(lambda i: i, depth=2)(range(3)))
