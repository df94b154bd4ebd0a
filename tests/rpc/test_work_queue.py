"""The server's work queue: newest idle worker first, nothing lost, clean close."""

from __future__ import annotations

import threading
import time

import pytest
from support.threads import run_in_threads
from support.waiting import wait_until

from pyg_dist.rpc.work_queue import WorkQueue


def _consumers(queue: WorkQueue, names: list[str], got: list[tuple[str, object]]
               ) -> list[threading.Thread]:
    """Starts one consumer per name, each parked before the next starts, so
    their parking order is the order of ``names``."""
    threads = []
    for name in names:
        def consume(name: str = name) -> None:
            while (item := queue.get()) is not None:
                got.append((name, item))

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        threads.append(thread)
        parked = len(threads)
        wait_until(lambda: queue.waiting == parked, 10,  # noqa: B023 (called at once)
                   f"consumer {name!r} to park")
    return threads


def test_the_consumer_that_parked_last_is_woken_first():
    queue = WorkQueue(16)
    got: list[tuple[str, object]] = []
    threads = _consumers(queue, ["first", "second", "third"], got)
    try:
        for i in range(5):
            queue.put_nowait(i)
            wait_until(lambda i=i: len(got) == i + 1 and queue.waiting == 3, 10,
                       f"item {i} to be taken and its consumer to park again")
        # One at a time, the same consumer (the last to park) takes every
        # item and parks again on top; FIFO wake-ups would rotate.
        assert got == [("third", i) for i in range(5)]
    finally:
        assert queue.close() == []
        for thread in threads:
            thread.join(10)
    assert not any(thread.is_alive() for thread in threads)


def test_items_come_out_in_order_each_exactly_once_across_consumers():
    queue = WorkQueue(10_000)
    got: list[tuple[str, object]] = []
    threads = _consumers(queue, ["a", "b", "c", "d"], got)
    try:
        for i in range(5_000):
            queue.put_nowait(i)
        wait_until(lambda: len(got) == 5_000, 60, "the consumers to take 5,000 items")
        assert sorted(item for _, item in got) == list(range(5_000))
        # Every consumer pops the oldest item: within one consumer the
        # items it took are increasing.
        for name in "abcd":
            mine = [item for who, item in got if who == name]
            assert mine == sorted(mine)
    finally:
        queue.close()
        for thread in threads:
            thread.join(10)


def test_concurrent_gets_and_puts_lose_nothing():
    queue = WorkQueue(1 << 20)
    got: list[int] = []
    lock = threading.Lock()
    total = 20_000

    def worker(t: int) -> None:
        if t == 0:  # the single producer, racing the consumers' parking
            for i in range(total):
                queue.put_nowait(i)
                if i % 1000 == 0:
                    # Not a wait: a pause that lets consumers drain the
                    # queue and park, so puts also meet parked consumers.
                    time.sleep(0.001)
            wait_until(lambda: len(got) == total, 60, f"the consumers to take {total} items")
            queue.close()
            return
        while (item := queue.get()) is not None:
            with lock:
                got.append(item)

    run_in_threads(worker, 5, timeout=120)
    assert sorted(got) == list(range(total))


def test_full_counts_queued_items():
    queue = WorkQueue(2)
    assert not queue.full()
    queue.put_nowait("a")
    queue.put_nowait("b")
    assert queue.full() and len(queue) == 2
    assert queue.get() == "a"
    assert not queue.full()


def test_close_drops_queued_items_wakes_every_consumer_and_refuses_more():
    queue = WorkQueue(8)
    got: list[tuple[str, object]] = []
    threads = _consumers(queue, ["a", "b", "c"], got)
    assert queue.close() == []
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    queue.put_nowait("late")
    assert len(queue) == 0 and queue.get() is None and got == []

    queued = WorkQueue(8)
    queued.put_nowait(1)
    queued.put_nowait(2)
    assert queued.close() == [1, 2]
    assert queued.get() is None


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="maxsize must be at least 1"):
        WorkQueue(0)
