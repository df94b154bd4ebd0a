"""Fixtures for the reliability suite: Cora in two parts, real server
processes, and helpers that check a batch against the original graph.

Every server here is a real ``pyg-dist serve`` process on loopback, started
through :mod:`support.servers` and stopped in teardown.
"""

from __future__ import annotations

import os

import psutil
import pytest
import torch
from reliability_checks import LIMIT
from support.servers import serve_parts

import pyg_dist
from pyg_dist.partitioning import PartitionReader


@pytest.fixture(scope="session")
def cora1_root(tmp_path_factory, cora_data):
    """Cora as one part: a whole graph behind a single server."""
    root = tmp_path_factory.mktemp("reliability-cora") / "cora-1"
    pyg_dist.partition(cora_data, 1, root, partitioner="random")
    return root


@pytest.fixture(scope="session")
def edge_keys(cora_data):
    """Sorted ``src * N + dst`` keys of Cora's edges, for membership checks."""
    n = cora_data.num_nodes
    return torch.sort(cora_data.edge_index[0] * n + cora_data.edge_index[1]).values



# The shared server gets an address-space limit: an accidental (or, in
# test_bounds, deliberate) huge allocation then fails fast inside it
# instead of exhausting the test machine.
ADDRESS_SPACE_LIMIT = 8 << 30
# Replies the shared server queues for a client that does not read them
# (RpcConfig.reply_hwm). The fuzz test keeps at most a quarter of this in
# flight: libzmq learns that queued replies were read only every ~hwm/2
# messages, so a window near the hwm can lose replies to a reading client.
REPLY_HWM = 32


@pytest.fixture(scope="session")
def part0_server(cora2_root):
    """``(process, endpoint)`` of one ``pyg-dist serve`` process for part 0
    (2 workers, 1 MiB request limit, reply queue of REPLY_HWM per client),
    shared by the tests that send it raw frames; each of them checks
    afterwards that it still serves. Part 1 is served beside it, and both
    know each other (``sample_tree`` forwards there)."""
    args = ["--workers", "2", "--max-message-bytes", str(LIMIT)]
    env = dict(os.environ, PYG_DIST_REPLY_HWM=str(REPLY_HWM))
    with serve_parts(cora2_root, serve_args=args, env=env, forwarding=True) as cluster:
        proc, endpoint = cluster.processes[0], cluster.endpoints[0]
        psutil.Process(proc.pid).rlimit(psutil.RLIMIT_AS,
                                        (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
        yield proc, endpoint


@pytest.fixture(scope="session")
def part0(cora2_root):
    """Part 0 as stored on disk (node ids, features, CSC)."""
    return PartitionReader(cora2_root).load_part(0)
