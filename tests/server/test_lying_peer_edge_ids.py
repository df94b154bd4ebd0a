"""A coordinator refuses a peer's edge ids past the graph's edge count.

Issue 31, item 6: the ``sample`` reply check refuses negative ids, counts
over the fan-out and repeated edges, but cannot know the graph's size; a
peer answering edge ids past the graph's edges made them reach the trainer's
batch (``e_id``), where an edge-feature lookup fails far from the liar. The
coordinator knows the graph's edge count per edge type and refuses such an
answer with a ``ProtocolError`` that names the peer's part.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from support.one_hop import one_hop

from pyg_dist.errors import RemoteError
from pyg_dist.protocol.ops import PARTITION_OPS, SAMPLE_TREE
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer
from pyg_dist.server import PartitionServer

SEEDS = torch.arange(64)  # nodes of both parts (random partition)
ARGS = {"edge_types": [None], "num_neighbors": [[5, 3]], "seed_types": [None], "seed": 11}


@contextlib.contextmanager
def _liar(root, part: int, lie):
    """Part ``part`` of ``root`` served honestly but for ``sample``, whose
    answer ``lie`` rewrites."""
    ops = PartitionServer(root, part).ops
    handlers = dict(ops.handlers())
    honest = handlers["sample"]

    def sample(args, tensors):
        result, out = honest(args, tensors)
        return result, lie(list(out), ops.reader.num_edges)

    handlers["sample"] = sample
    with RpcServer(handlers, config=RpcConfig(workers=2), name="liar",
                   ops=PARTITION_OPS) as server:
        yield server


def _past_the_edges(out, num_edges):
    if out[2].numel():
        out[2] = out[2].clone()
        out[2][-1] = num_edges  # one id past the last edge
    return out


def _tree(root, liar_endpoint):
    endpoints: list[str] = []
    with PartitionServer(root, 0, peers=lambda: endpoints) as coordinator:
        endpoints += [coordinator.endpoint, liar_endpoint]
        with RpcClient([coordinator.endpoint], RpcConfig(timeout=30)) as client:
            return client.call(0, "sample_tree", ARGS, [SEEDS])


def test_an_honest_peer_through_the_same_path_is_answered(cora2_root):
    with _liar(cora2_root, 1, lambda out, num_edges: out) as peer:
        reply = _tree(cora2_root, peer.endpoint)
    SAMPLE_TREE.check_reply(reply, ARGS, [SEEDS], "coordinator")
    assert reply.tensors[3].numel() > 0


def test_edge_ids_past_the_graph_are_refused_naming_the_peers_part(cora2_root):
    with _liar(cora2_root, 1, _past_the_edges) as peer, \
            pytest.raises(RemoteError) as info:
        _tree(cora2_root, peer.endpoint)
    text = str(info.value)
    assert info.value.remote_type == "ProtocolError", text
    assert "part 1" in text and "edge id 10556, past the 10556 edges" in text, text
    assert peer.endpoint.rsplit(":", 1)[1] not in text, text  # its part, not its address


def _trainer_hop(root, liar_endpoint):
    """One hop sampled by a trainer (hop by hop) over part 0 honest and the
    liar serving part 1."""
    from pyg_dist.store.connect import connect

    with PartitionServer(root, 0) as honest:
        fs, gs = connect([honest.endpoint, liar_endpoint])
        try:
            return one_hop(gs, SEEDS, 5, False, 3)
        finally:
            fs.close()


def test_a_trainer_sampling_hop_by_hop_refuses_them_naming_the_server(cora2_root):
    from pyg_dist.errors import ProtocolError

    with _liar(cora2_root, 1, lambda out, num_edges: out) as peer:
        counts, _, eids = _trainer_hop(cora2_root, peer.endpoint)
    assert int(counts.sum()) == eids.numel() > 0  # the same path, honest: answered
    with _liar(cora2_root, 1, _past_the_edges) as peer, \
            pytest.raises(ProtocolError, match="edge id 10556, past the 10556 edges") as info:
        _trainer_hop(cora2_root, peer.endpoint)
    assert peer.endpoint in str(info.value)  # the trainer names the liar's address
