"""A frozen server (SIGSTOP) and a dead link mid-epoch, with the defaults.

Neither closes a connection, so only heartbeats can tell: the training loop
must get a typed error naming the server within ``heartbeat_timeout`` (5 s
with the defaults, where the deadline is 30 s),
with ``prefetch=0`` and ``prefetch=4``; no thread is left behind; and once
the server runs again (SIGCONT) or the link is back, the next epoch of the
same loader completes with correct batches.

The link is cut by a proxy between trainer and server
(:class:`support.blackhole_proxy.BlackholeProxy`): both TCP connections stay
open and nothing gets through, as with a pulled cable. Times to error are
printed (``-s``); the detection bound (plus 1 s for a busy machine) is the
only timed assertion. SIGKILL is in ``test_kill_and_restart.py``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest
from reliability_checks import assert_batch_matches_graph
from support.blackhole_proxy import BlackholeProxy
from support.servers import serve_parts

from pyg_dist.errors import RpcError, ServerUnavailableError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.connect import connect

CONFIG = RpcConfig(connect_timeout=30.0)  # every other field at its default
BOUND = CONFIG.heartbeat_timeout + 1.0  # 1 s for a busy machine
TAKEN_BEFORE = 3  # batches taken before the server freezes or the link dies


def _our_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("pyg-dist-prefetch", "pyg-dist-rpc-client",
                                  "blackhole-proxy"))]


def _fail_mid_epoch(loader, cora_data, edge_keys, break_it) -> tuple[RpcError, float]:
    """Takes a few batches, calls ``break_it()``, and returns the typed error
    the rest of the epoch raised and how long after the break it came."""
    batches = iter(loader)
    for _ in range(TAKEN_BEFORE):
        assert_batch_matches_graph(next(batches), cora_data, edge_keys)
    break_it()
    broken_at = time.monotonic()
    with pytest.raises(RpcError) as info:
        for _ in batches:
            pass
    return info.value, time.monotonic() - broken_at


def _next_epoch_is_complete(loader, cora_data, edge_keys) -> None:
    seen = 0
    for batch in loader:
        assert_batch_matches_graph(batch, cora_data, edge_keys)
        seen += batch.batch_size
    assert seen == cora_data.num_nodes


def _check_detection(err: RpcError, elapsed: float, address: str, what: str,
                     prefetch: int) -> None:
    print(f"\n{what}, prefetch={prefetch}: {type(err).__name__} {elapsed:.3f}s after "
          f"(heartbeat {CONFIG.heartbeat_interval}s / {CONFIG.heartbeat_timeout}s, "
          f"deadline {CONFIG.timeout}s)")
    assert isinstance(err, ServerUnavailableError), err
    assert err.address == address and address in str(err)
    assert elapsed < BOUND, f"{what} detected after {elapsed:.3f}s; bound {BOUND}s"


@pytest.mark.parametrize("prefetch", [0, 4], ids=["prefetch0", "prefetch4"])
def test_a_frozen_server_is_detected_by_heartbeats_and_used_again_after_sigcont(
        cora2_root, cora_data, edge_keys, prefetch):
    before = _our_threads()
    with serve_parts(cora2_root) as cluster:
        victim, address = cluster.processes[1], cluster.endpoints[1]
        fs, gs = connect(cluster.endpoints, CONFIG)
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=[5, 5], batch_size=128,
                                        shuffle=True, seed=7, prefetch=prefetch)
            try:
                err, elapsed = _fail_mid_epoch(loader, cora_data, edge_keys,
                                               lambda: victim.send_signal(signal.SIGSTOP))
            finally:
                victim.send_signal(signal.SIGCONT)
            _check_detection(err, elapsed, address, "SIGSTOP", prefetch)
            assert victim.poll() is None  # alive all along
            _next_epoch_is_complete(loader, cora_data, edge_keys)
        finally:
            fs.close()
    assert _our_threads() == before


@pytest.mark.parametrize("prefetch", [0, 4], ids=["prefetch0", "prefetch4"])
def test_a_dead_link_is_detected_by_heartbeats_and_used_again_once_back(
        cora2_root, cora_data, edge_keys, prefetch):
    before = _our_threads()
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(serve_parts(cora2_root))
        proxy = stack.enter_context(BlackholeProxy(cluster.endpoints[1]))
        fs, gs = connect([cluster.endpoints[0], proxy.endpoint], CONFIG)
        stack.callback(fs.close)
        loader = DistNeighborLoader((fs, gs), num_neighbors=[5, 5], batch_size=128,
                                    shuffle=True, seed=7, prefetch=prefetch)
        err, elapsed = _fail_mid_epoch(loader, cora_data, edge_keys, proxy.cut)
        _check_detection(err, elapsed, proxy.endpoint, "link cut", prefetch)
        proxy.restore()
        _next_epoch_is_complete(loader, cora_data, edge_keys)
    assert _our_threads() == before
