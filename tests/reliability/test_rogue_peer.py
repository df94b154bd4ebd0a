"""A coordinator (a server forwarding a batch's hops) whose peer list names a
rogue server streaming one endless reply holds no more than its reply
receive bound for it: the connection is cut, the tree fails naming the
peer trouble, and the coordinator keeps serving. Its memory is measured
(the server process's resident set, sampled while the rogue streams)."""

from __future__ import annotations

import os
import threading

import psutil
import pytest
import torch
from support.rogue_server import RogueServer
from support.servers import serve_parts

from pyg_dist.errors import RemoteError
from pyg_dist.rpc import RpcClient, RpcConfig

BOUND = 16 << 20
STREAMED = 512 << 20


@pytest.mark.timeout(240)
def test_a_coordinator_holds_at_most_its_bound_for_a_rogue_peer(cora2_root):
    env = dict(os.environ, PYG_DIST_REPLY_RECEIVE_BUDGET=str(BOUND),
               PYG_DIST_MAX_REPLY_BYTES=str(8 << 20),
               PYG_DIST_CONNECT_TIMEOUT="30")
    with RogueServer(total=STREAMED) as rogue, \
            serve_parts(cora2_root, [0], env=env, forwarding=True) as cluster:
        cluster.set_peers([cluster.endpoints[0], rogue.endpoint])
        server = psutil.Process(cluster.processes[0].pid)
        start = peak = server.memory_info().rss
        done = threading.Event()

        def sample_rss() -> None:
            nonlocal peak
            while not done.wait(0.002):
                peak = max(peak, server.memory_info().rss)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        try:
            with RpcClient(cluster.endpoints, RpcConfig(timeout=60)) as client:
                with pytest.raises(RemoteError, match="cannot reach its peers") as info:
                    client.call(0, "sample_tree", {"edge_types": [None], "num_neighbors": [[2]],
                                                   "seed_types": [None], "seed": 1},
                                [torch.arange(4)])
                # Still serving.
                assert client.call(0, "meta").result["part"] == 0
        finally:
            done.set()
            sampler.join(10)
    assert f"> {BOUND} bytes" in str(info.value), str(info.value)
    growth = peak - start
    assert growth < BOUND + (48 << 20), (growth, rogue.sent)
