"""A dead partition server becomes a typed error naming it (never a hang: the
RPC deadline is 2 s, pytest-timeout guards the test)."""

from __future__ import annotations

import pytest
from support.servers import serve_parts

from pyg_dist.errors import RpcError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.store.connect import connect


def test_a_killed_server_fails_the_batch_with_its_address(cora_data, tmp_path):
    root = str(tmp_path / "cora2")
    partition(cora_data, 2, root)
    with serve_parts(root) as cluster:
        fs, gs = connect(cluster.endpoints, RpcConfig(timeout=2.0, connect_timeout=5.0))
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=[5, 5], batch_size=64,
                                        prefetch=2, seed=0)
            it = iter(loader)
            next(it)  # both servers answer
            dead = cluster.processes[1]
            dead.kill()
            dead.wait(10)
            with pytest.raises(RpcError) as info:
                for _ in it:
                    pass
            assert cluster.endpoints[1] in str(info.value) or \
                info.value.address == cluster.endpoints[1]
        finally:
            fs.close()
