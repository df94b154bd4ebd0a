"""The remote feature store lends same-host servers shared memory for big
replies: real server processes on 127.0.0.1, real segments in /dev/shm."""

from __future__ import annotations

import os

import pytest
import torch
from support.shm_files import descriptor_open, has_file, needs_shm
from support.threads import run_in_threads
from torch_geometric.data import TensorAttr

from pyg_dist.rpc import shm as shared_memory
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.shm import (
    MIN_BYTES,
    SHM_DIR,
    Lender,
    SegmentPool,
    remove_stale_segments,
)
from pyg_dist.store.connect import connect

pytestmark = needs_shm


@pytest.fixture
def store(endpoints):
    fs, _ = connect(endpoints)
    # No server writes rows in place here (tests/store/test_rows_in_place.py):
    # these tests are about replies into lent segments.
    fs._local = []
    try:
        yield fs
    finally:
        fs.close()


def _fetch(fs, ids):
    return fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])


def _pools(fs):
    client = fs.router.client
    for part in range(3):
        client.ping(part)  # its host known, the client lends it memory
    return [client.transport._lender.pool(part) for part in range(3)]


def test_rows_through_shared_memory_equal_the_graph_and_tcp(data, endpoints, store):
    ids = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))[:2000]
    for _ in range(3):  # the first call maps the segments, the next ones reuse them
        x, y = _fetch(store, ids)
        assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    pools = _pools(store)
    assert all(p.disabled is None and p.held_bytes > 0 for p in pools)
    # Mapped by their servers: the client let go of their descriptors (and
    # memfd segments never have a file).
    assert all(not descriptor_open(s) and not has_file(s) for p in pools for s in p._all)

    tcp, _ = connect(endpoints, RpcConfig(shared_memory_bytes=0))
    try:
        x_tcp, y_tcp = _fetch(tcp, ids)
        assert torch.equal(x_tcp, x) and torch.equal(y_tcp, y)
        assert all(p.held_bytes == 0 and p.disabled for p in _pools(tcp))
    finally:
        tcp.close()
    store.close()
    assert all(p.held_bytes == 0 for p in pools)


def test_small_replies_travel_over_the_socket(data, store):
    ids = torch.tensor([3, 1000, 2000])  # 3 rows: far below MIN_BYTES
    x, _ = _fetch(store, ids)
    assert torch.equal(x, data.x[ids])
    assert 3 * data.x.size(1) * 4 < MIN_BYTES
    assert all(p.held_bytes == 0 for p in _pools(store))


def test_concurrent_fetches_share_the_pools(data, store):
    results = {}

    def work(t):
        gen = torch.Generator().manual_seed(t)
        for i in range(8):
            ids = torch.randperm(data.num_nodes, generator=gen)[:500 + 100 * t]
            x, y = _fetch(store, ids)
            results[(t, i)] = torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])

    run_in_threads(work, 8)
    assert len(results) == 64 and all(results.values())
    limit = store.router.client.config.shared_memory_bytes
    assert all(0 < p.held_bytes <= limit for p in _pools(store))


def test_a_server_that_lost_its_mappings_is_answered_over_again(data, store):
    ids = torch.arange(0, data.num_nodes, 2)
    _fetch(store, ids)
    client = store.router.client
    lost = {s.name for pool in _pools(store) for s in pool._all}
    for part, pool in enumerate(_pools(store)):
        keys = [s.key for s in pool._all]
        # What a restarted server looks like to its client: nothing mapped.
        assert client.call(part, "release", {"segments": keys}).result["released"] == len(keys)
    x, y = _fetch(store, ids)
    assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    assert all(p.disabled is None and p.held_bytes > 0 for p in _pools(store))
    assert lost.isdisjoint(s.name for pool in _pools(store) for s in pool._all)


def test_a_server_that_cannot_map_a_segment_gets_replies_over_the_socket(data, store):
    pool = _pools(store)[0]
    lost = pool.acquire(8 << 20)
    # As if the server could not open it (another pid namespace): the
    # descriptor it is sent names something else.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, lost.fd)
    os.close(null)
    pool.release(lost)
    ids = torch.arange(data.num_nodes)  # every part, ~15 MB: fits the 8 MiB segment of part 0
    x, y = _fetch(store, ids)
    assert torch.equal(x, data.x) and torch.equal(y, data.y)
    assert pool.disabled is not None and "cannot open" in pool.disabled
    assert pool.held_bytes == 0
    assert all(p.disabled is None for p in _pools(store)[1:])


def test_pool_reuses_segments_within_its_limit():
    pool = SegmentPool(3 << 20, "tcp://127.0.0.1:1")
    try:
        assert pool.acquire(MIN_BYTES - 1) is None
        first = pool.acquire(2 << 20)
        assert first is not None and first.size >= 2 << 20 and descriptor_open(first)
        assert pool.acquire(2 << 20) is None  # a second one would pass the limit
        pool.release(first)
        assert pool.acquire(1 << 20) is first  # reused, not made again
        first.announce()
        pool.discard(first)
        assert pool.held_bytes == 0 and pool.take_dropped() == [first.key]
        again = pool.acquire(2 << 20)
        assert again is not None and again is not first
    finally:
        pool.close()
    assert pool.held_bytes == 0 and pool.acquire(2 << 20) is None
    assert not any(descriptor_open(s) or has_file(s) for s in (first, again))


def test_only_servers_on_this_host_get_segments():
    segments = Lender(["tcp://a:1", "tcp://b:1"], 64 << 20, ["elsewhere", shared_memory.host_id()])
    assert segments.pool(0).disabled == "the server runs on another host"
    assert segments.pool(1).disabled is None
    assert Lender(["tcp://b:1"], 0, [shared_memory.host_id()]).pool(0).disabled
    segments.close(lambda *args, **kwargs: None)


def test_no_segment_takes_more_than_a_quarter_of_the_available_memory():
    with open("/proc/meminfo") as meminfo:
        free = next(int(line.split()[1]) * 1024 for line in meminfo
                    if line.startswith("MemAvailable:"))
    pool = SegmentPool(1 << 62, "tcp://127.0.0.1:1")  # no limit of its own
    try:
        assert pool.acquire(free // 3) is None  # would leave too little for others
        assert pool.disabled is None  # not an error: later, smaller replies may fit
        small = pool.acquire(1 << 20)
        assert small is not None
    finally:
        pool.close()


def _fetch_in_child(fs, ids, expected, result):
    # As a DataLoader worker does: OpenMP's thread pool does not survive fork.
    torch.set_num_threads(1)
    x, _ = _fetch(fs, ids)
    result.put(bool(torch.equal(x, expected))
               and fs.router.client.transport._lender.pool(0).held_bytes > 0)


def test_a_forked_child_gets_its_own_segments(data, store):
    import multiprocessing

    ids = torch.arange(0, data.num_nodes, 3)
    _pools(store)
    _fetch(store, ids)  # the parent's pools exist
    parents = {s.name for s in _pools(store)[0]._all}
    ctx = multiprocessing.get_context("fork")
    result = ctx.Queue()
    # Threads of the parent hold the store's locks when it forks (as a
    # prefetch thread may when DataLoader workers start): the child must not
    # wait on them.
    with store.router.client.transport._lender._lock, store.router._lock:
        child = ctx.Process(target=_fetch_in_child, args=(store, ids, data.x[ids], result))
        child.start()
    try:
        assert result.get(timeout=60) is True
        child.join(30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
    # The parent's segments are untouched and still serve it.
    assert {s.name for s in _pools(store)[0]._all} == parents
    x, _ = _fetch(store, ids)
    assert torch.equal(x, data.x[ids])


def test_files_left_by_killed_clients_are_removed_after_an_hour():
    """Segments are memfd now; the segment files earlier versions left in
    /dev/shm (a client killed before a server mapped one) are still
    removed after an hour, and nothing else is."""
    import secrets
    import time

    old, fresh, other = (os.path.join(SHM_DIR, name) for name in (
        "pyg-dist-shm-" + secrets.token_hex(16), "pyg-dist-shm-" + secrets.token_hex(16),
        "pyg-dist-test-not-a-segment-" + secrets.token_hex(4)))
    for path in (old, fresh, other):
        open(path, "w").close()
    try:
        two_hours_ago = time.time() - 7200
        os.utime(old, (two_hours_ago, two_hours_ago))
        os.utime(other, (two_hours_ago, two_hours_ago))
        assert remove_stale_segments() >= 1
        assert not os.path.exists(old)
        assert os.path.exists(fresh) and os.path.exists(other)
    finally:
        for path in (old, fresh, other):
            if os.path.exists(path):
                os.unlink(path)


_CLOSE_WHILE_READING = """
import torch
from pyg_dist.rpc.shm import SegmentPool, view
pool = SegmentPool(64 << 20, "tcp://127.0.0.1:1")
segment = pool.acquire(1 << 20)
rows = view(segment.payload, 0, torch.float32, (1000, 64))
rows.fill_(2.0)
pool.close()  # another thread closing the store while this one still reads
print(float(rows.sum()))
"""


def test_closing_the_pool_leaves_live_views_readable():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _CLOSE_WHILE_READING], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # -11 was a segfault
    assert float(out.stdout.split()[-1]) == 128000.0
