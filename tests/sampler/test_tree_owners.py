"""A tree's nodes grouped by owner (``sample_tree`` with ``owners``).

Real :class:`~pyg_dist.server.PartitionServer` objects on loopback sockets,
or the served Cora fixture. The grouping must be the partition book's split
of the tree's nodes, refused when it lies, and spare the trainer its own
split of a batch's ids without changing a batch.
"""

from __future__ import annotations

import threading

import pytest
import torch
from support.forwarding_servers import forwarding_servers

from pyg_dist.errors import ProtocolError, RemoteError
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.protocol.ops import SAMPLE_TREE
from pyg_dist.rpc import RpcClient
from pyg_dist.rpc.wire_format import Reply
from pyg_dist.store import known_owners
from pyg_dist.store.connect import connect

SEEDS = torch.arange(5, 2708, 9)


def _tree_args(fan_outs, **more):
    return {"edge_types": [None], "num_neighbors": [fan_outs], "seed_types": [None], **more}


def test_the_owner_order_is_the_books_split_of_the_trees_nodes(cora2_root):
    with forwarding_servers(cora2_root) as endpoints, RpcClient(endpoints) as client:
        fs, gs = connect(endpoints)
        try:
            for part in (0, 1):
                args = _tree_args([5, 3], seed=11 + part, owners=True)
                reply = client.call(part, "sample_tree", args, [SEEDS[:40]])
                SAMPLE_TREE.check_reply(reply, args, [SEEDS[:40]], endpoints[part])
                node, order = reply.tensors[0], reply.tensors[-1]
                counts = reply.result["owner_counts"]
                split = gs.router.book.split(node)
                assert counts == [int((gs.router.book.part_of(node) == p).sum())
                                  for p in (0, 1)]
                assert torch.equal(order, torch.cat([positions for _, positions, _ in split]))
                # Without it the tree is as before, one tensor shorter.
                plain = client.call(part, "sample_tree", _tree_args([5, 3], seed=11 + part),
                                    [SEEDS[:40]])
                assert len(plain.tensors) == len(reply.tensors) - 1
                assert "owner_counts" not in plain.result
                for a, b in zip(plain.tensors, reply.tensors):
                    assert torch.equal(a, b)
        finally:
            fs.close()


def test_owners_is_refused_where_it_does_not_apply_and_the_server_keeps_serving(cora2_root):
    typed = {"edge_types": [["paper", "cites", "paper"]], "num_neighbors": [[2]],
             "seed_types": ["paper"], "seed": 1, "owners": True}
    with forwarding_servers(cora2_root) as endpoints, RpcClient(endpoints) as client:
        with pytest.raises(RemoteError, match="'owners'"):
            client.call(0, "sample_tree", _tree_args([2], seed=1, owners=1), [SEEDS[:4]])
        with pytest.raises(RemoteError, match="owners|edge type"):
            client.call(0, "sample_tree", typed, [SEEDS[:4]])
        args = _tree_args([2], seed=1, owners=True)
        reply = client.call(0, "sample_tree", args, [SEEDS[:4]])
        SAMPLE_TREE.check_reply(reply, args, [SEEDS[:4]], endpoints[0])


def test_a_lying_owner_order_is_refused_before_the_sampler_sees_it():
    args, seeds = _tree_args([2], seed=1, owners=True), [torch.tensor([4, 9])]
    node = torch.tensor([4, 9, 11])

    def index(*values):  # row and col travel as int32
        return torch.tensor(values, dtype=torch.int32)

    tree = [node, index(2), index(0), torch.tensor([77]), torch.tensor([2, 1]),
            torch.tensor([1])]
    good = ({"node_types": [None], "owner_counts": [2, 1]}, [*tree, torch.tensor([0, 2, 1])])
    SAMPLE_TREE.check_reply(Reply(*good), args, seeds, "x")
    lies = [
        ({"node_types": [None]}, good[1]),  # no counts
        ({"node_types": [None], "owner_counts": [2, 2]}, good[1]),  # not adding up
        ({"node_types": [None], "owner_counts": [4, -1]}, good[1]),  # a negative count
        ({"node_types": [None], "owner_counts": []}, good[1]),  # no parts
        ({"node_types": [None], "owner_counts": [2, 1.0]}, good[1]),  # a float count
        (good[0], [*tree, torch.tensor([0, 3, 1])]),  # a position past the nodes
        (good[0], [*tree, torch.tensor([0, -1, 1])]),  # a negative position
        (good[0], [*tree, torch.tensor([0, 2])]),  # an entry short
        (good[0], [*tree, torch.tensor([0, 2, 2])]),  # a node twice, another never
        (good[0], [*tree, torch.tensor([0, 2, 1], dtype=torch.int32)]),  # not int64
        (good[0], tree),  # no order at all: the tree's last tensor read as one
    ]
    for result, tensors in lies:
        with pytest.raises(ProtocolError, match="sample_tree"):
            SAMPLE_TREE.check_reply(Reply(result, list(tensors)), args, seeds, "x")


def test_a_loader_fetches_a_trees_rows_without_splitting_its_ids(cora_stores3):
    """The trainer's split of a batch's ids is skipped (counted on the real
    router) and the batches are those of hop-by-hop sampling."""
    fs, gs = cora_stores3
    kwargs = dict(num_neighbors=[10, 5], input_nodes=SEEDS, batch_size=64, seed=3)
    splits = []
    split_checked = fs.router.split_checked

    def counted(ids, *args, **kw):
        splits.append(ids.numel())
        return split_checked(ids, *args, **kw)

    fs.router.split_checked = counted
    try:
        on_servers = list(DistNeighborLoader((fs, gs), server_hops=True, **kwargs))
        assert splits == []
        from_here = list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs))
        assert len(splits) == len(from_here) == len(on_servers) == 5
    finally:
        del fs.router.split_checked
    for a, b in zip(on_servers, from_here):
        for name in ("n_id", "edge_index", "e_id", "x", "y", "input_id"):
            assert torch.equal(a[name], b[name]), name


def test_a_remembered_grouping_is_only_for_those_very_ids():
    node = torch.tensor([5, 7, 9, 11])
    shares = [(0, torch.tensor([0, 2]), torch.tensor([5, 9])),
              (1, torch.tensor([1, 3]), torch.tensor([7, 11]))]
    known_owners.remember(node, shares)
    assert known_owners.take(node.clone()) is None  # equal values, other memory
    assert known_owners.take(node[:3]) is None
    seen = []
    thread = threading.Thread(target=lambda: seen.append(known_owners.take(node)))
    thread.start()
    thread.join()
    assert seen == [None]  # another thread's batch
    assert known_owners.take(node.view(-1)) is shares  # a view of it: the same ids
    assert known_owners.take(node) is None  # once
    known_owners.remember(node, shares)
    node[0] = 6  # changed in place since: its version moved on
    assert known_owners.take(node) is None
    known_owners.forget()


def test_owner_counts_for_more_parts_than_the_graph_are_refused(cora2_root, monkeypatch):
    """A coordinator that counts nodes for a part the graph does not have
    (the counts still adding up) would send those rows' ids to a server that
    does not exist: the sampler refuses the tree with a typed error."""
    import pyg_dist.server.forwarding as forwarding

    honest = forwarding.tree_owners.encode

    def lying(shares, num_parts):  # part 1's nodes counted as a third part's
        counts, order = honest(shares, num_parts)
        return counts[:-1] + [0, counts[-1]], order

    with forwarding_servers(cora2_root) as endpoints:
        monkeypatch.setattr(forwarding.tree_owners, "encode", lying)
        fs, gs = connect(endpoints)
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=[5], input_nodes=SEEDS,
                                        batch_size=64, server_hops=True)
            with pytest.raises(ProtocolError, match="counted nodes for 3 parts, the graph "
                                                    "has 2"):
                next(iter(loader))
        finally:
            fs.close()
