"""A batch's node rows written during its ``sample_tree`` (``rows``).

Real servers (the served Cora fixture: ``pyg-dist serve`` processes on
loopback, forwarding among themselves, on this host; or
:class:`~pyg_dist.server.PartitionServer` objects in this process). The
trainer's loader must make one call a batch, with batches bit for bit those
of hop-by-hop sampling; the coordinator must refuse what is malformed and
copy in the rows of an owner that cannot write them itself.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from support.forwarding_servers import forwarding_servers
from support.shm_files import needs_shm

from pyg_dist.errors import ProtocolError, RemoteError
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.protocol import tree_rows
from pyg_dist.protocol.ops import SAMPLE_TREE
from pyg_dist.rpc import RpcClient
from pyg_dist.store import tree_outputs

SEEDS = torch.arange(5, 2708, 9)
FIELDS = ("n_id", "edge_index", "e_id", "x", "y", "train_mask", "input_id")


@contextlib.contextmanager
def _counted_calls(router):
    """Every op the trainer's router sends, in order."""
    ops: list[str] = []
    call_all = router.call_all

    def counted(requests, *args, **kwargs):
        ops.extend(r.op if hasattr(r, "op") else r[1] for r in requests)
        return call_all(requests, *args, **kwargs)

    router.call_all = counted
    try:
        yield ops
    finally:
        del router.call_all


def _same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in FIELDS:
            if name in y:
                assert torch.equal(x[name], y[name]), name


def test_a_batch_costs_the_trainer_one_call_and_equals_hop_by_hop(cora_stores3):
    fs, gs = cora_stores3
    kwargs = dict(num_neighbors=[10, 5], input_nodes=SEEDS, batch_size=64, seed=3)
    copied = fs.router.copied_rows
    with _counted_calls(fs.router) as ops:
        on_servers = list(DistNeighborLoader((fs, gs), server_hops=True, **kwargs))
    assert ops == ["sample_tree"] * len(on_servers) == ["sample_tree"] * 5
    assert fs.router.copied_rows == copied  # written in place: nothing copied here
    from_here = list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs))
    _same_batches(on_servers, from_here)
    # The rows lie in the lent outputs: a view of the segment, one row a node.
    assert on_servers[0].x.size(0) == on_servers[0].n_id.numel()


def test_a_link_batch_with_negatives_costs_one_call_too(cora_data, cora_stores3):
    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.loader.dist_link_neighbor_loader import DistLinkNeighborLoader

    fs, gs = cora_stores3
    loader = DistLinkNeighborLoader((fs, gs), num_neighbors=[5, 3], server_hops=True,
                                    edge_label_index=cora_data.edge_index[:, ::50],
                                    neg_sampling=NegativeSampling("binary"), batch_size=64,
                                    seed=2)
    with _counted_calls(fs.router) as ops:
        batches = list(loader)
    assert ops == ["sample_tree"] * len(batches) and len(batches) == 4
    for batch in batches:
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
        assert torch.equal(batch.y, cora_data.y[batch.n_id])


def test_an_owner_without_a_place_has_its_rows_copied_in_by_the_coordinator(cora_stores3):
    """A part the trainer lends nothing (its pool does not place it) gets a
    plain ``get`` from the coordinator, which copies its rows in."""
    fs, gs = cora_stores3
    kwargs = dict(num_neighbors=[10, 5], input_nodes=SEEDS[:192], batch_size=64, seed=8)
    pool = fs.output_pool()
    assert pool is not None and pool.parts == {0, 1, 2}
    pool.parts.discard(1)
    try:
        with _counted_calls(fs.router) as ops:
            on_servers = list(DistNeighborLoader((fs, gs), server_hops=True, **kwargs))
        # Part 1 coordinates no tree now (it cannot map the outputs): its
        # batches are fetched as before, the others in their tree's call.
        assert ops.count("sample_tree") == 3 and 0 < ops.count("get") <= 3
    finally:
        pool.parts.add(1)
    _same_batches(on_servers, list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs)))


def test_a_tree_that_outgrows_its_lent_rows_is_fetched_as_usual(cora_stores3):
    """Lent too few rows (the sizes seen so far say a seed brings 0.001
    nodes), the first tree's rows are not written and the trainer fetches
    them; the tree's size counts, and the next trees are lent enough."""
    fs, gs = cora_stores3
    kwargs = dict(num_neighbors=[10, 5], input_nodes=SEEDS[:192], batch_size=64, seed=5)
    sizes = fs.tree_sizes
    fs.tree_sizes = tree_outputs.TreeSizes()
    fs.tree_sizes.saw(1000, 1)
    try:
        with _counted_calls(fs.router) as ops:
            on_servers = list(DistNeighborLoader((fs, gs), server_hops=True, **kwargs))
    finally:
        fs.tree_sizes = sizes
    first = ops.index("sample_tree", 1)
    assert ops[0] == "sample_tree" and set(ops[1:first]) == {"get"}
    assert ops[first:] == ["sample_tree", "sample_tree"]
    _same_batches(on_servers, list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs)))


def test_outside_a_loaders_fetch_a_tree_asks_for_no_rows(cora_stores3):
    fs, gs = cora_stores3
    sampler = DistNeighborLoader((fs, gs), num_neighbors=[5], input_nodes=SEEDS[:64],
                                 batch_size=64, server_hops=True).node_sampler
    with _counted_calls(fs.router) as ops:
        out = sampler.sample_from_nodes(next(iter(_index_batches(64))))
    assert ops == ["sample_tree"] and out.node.numel() > 64
    assert tree_outputs.planned(fs.router, 0, 10, 100) is None  # not inside fetching()
    with tree_outputs.fetching(fs):
        assert tree_outputs.planned(gs.router, 0, 10, None) is None  # unbounded tree
        plan = tree_outputs.planned(fs.router, 0, 10, 100)
    assert plan is not None and plan.attrs == [name for _, name in fs.features]
    assert plan.lease.tensors[0].size(0) <= 100 and plan.places[0] is not None
    plan.failed()  # never sent: its segment is given up


def _index_batches(size):
    from torch_geometric.sampler import NodeSamplerInput

    yield NodeSamplerInput(input_id=torch.arange(size), node=SEEDS[:size])


def _tree_args(**more):
    return {"edge_types": [None], "num_neighbors": [[3]], "seed_types": [None], "seed": 2,
            **more}


def test_malformed_rows_are_refused_and_the_server_keeps_serving(cora2_root):
    place = {"shm": {"name": "x", "token": "00"}, "offsets": [0], "rows": 10}
    bad = [
        ({"attrs": ["x"], "places": [place, None]}, "'rows' needs 'owners'", {}),
        ({"attrs": [], "places": [place, None]}, "rows", {"owners": True}),
        ({"attrs": ["x", "x"], "places": [place, None]}, "rows", {"owners": True}),
        ({"attrs": ["x"], "places": [place, None], "more": 1}, "rows", {"owners": True}),
        ({"attrs": ["x"], "places": [place]}, "one entry per part", {"owners": True}),
        ({"attrs": ["x"], "places": [None, place]}, "a place for the coordinator",
         {"owners": True}),
        ({"attrs": ["nope"], "places": [place, None]}, "no node feature 'nope'",
         {"owners": True}),
    ]
    with forwarding_servers(cora2_root) as endpoints, RpcClient(endpoints) as client:
        for rows, message, more in bad:
            with pytest.raises(RemoteError, match=message):
                client.call(0, "sample_tree", _tree_args(rows=rows, **more), [SEEDS[:4]])
        # Nothing lent with the request: the coordinator cannot map the
        # outputs and says so (a trainer then asks without rows).
        with pytest.raises(RemoteError, match="SharedMemoryError|not mapped|segment"):
            client.call(0, "sample_tree", _tree_args(
                owners=True, rows={"attrs": ["x"], "places": [place, None]}), [SEEDS[:4]])
        args = _tree_args(owners=True)
        reply = client.call(0, "sample_tree", args, [SEEDS[:4]])
        SAMPLE_TREE.check_reply(reply, args, [SEEDS[:4]], endpoints[0])


def test_a_lying_rows_outcome_is_refused():
    args = {"rows": {"attrs": ["x"], "places": [{"a": 1}, None, {"b": 2}]}}
    good = {"written": True, "placed": [0, 2], "refused": [], "lost": []}
    assert tree_rows.check(args, {"rows": good}) is None
    lies = [None, [], {"written": True, "placed": [0]},  # not the three lists
            {"placed": [0, 2], "refused": [], "lost": []},  # no written
            {**good, "written": 1}]  # not a bool
    lies += [{"written": True, **rows} for rows in [
        {"placed": [1], "refused": [], "lost": []},  # a part that had no place
        {"placed": [3], "refused": [], "lost": []},  # past the parts
        {"placed": [0, 0], "refused": [], "lost": []},  # twice
        {"placed": [0], "refused": [0], "lost": []},  # in two lists
        {"placed": [True], "refused": [], "lost": []},  # not an int
        {"placed": "0", "refused": [], "lost": []}]]
    for rows in lies:
        assert tree_rows.check(args, {"rows": rows}) is not None, rows
    with pytest.raises(ProtocolError):
        from pyg_dist.rpc.wire_format import Reply

        node = torch.tensor([4, 9])
        tree = [node, torch.tensor([], dtype=torch.int32), torch.tensor([], dtype=torch.int32),
                torch.tensor([], dtype=torch.long), torch.tensor([2, 0]), torch.tensor([0])]
        request = {"edge_types": [None], "num_neighbors": [[1]], "seed_types": [None],
                   "seed": 1, "owners": True, "rows": {"attrs": ["x"], "places": [{}, None]}}
        SAMPLE_TREE.check_reply(Reply({"node_types": [None], "owner_counts": [2, 0],
                                       "rows": {"written": True, "placed": [1],
                                                "refused": [], "lost": []}},
                                      [*tree, torch.tensor([0, 1])]),
                                request, [node], "x")


@needs_shm
def test_a_room_is_checked_before_the_coordinator_writes_into_it():
    """The room a trainer lends after its outputs, mapped as a server maps
    it (a real segment, this process as its owner): written through, and
    refused when malformed or past the segment."""
    from pyg_dist.errors import SharedMemoryError
    from pyg_dist.rpc.context import CallContext
    from pyg_dist.rpc.shm.attached import AttachedSegments
    from pyg_dist.rpc.shm.outputs import OutputPool

    pool, segments = OutputPool(64 << 20, [0]), AttachedSegments()
    try:
        lease = pool.lease([(torch.float32, (10, 4))], index_ids=10)
        ctx, arg, room = CallContext(segments), lease.arg(0), lease.room()
        assert room["slots"] == 20
        written = ctx.placed_room(arg, room)
        written.copy_(torch.arange(20))
        assert torch.equal(lease._index, torch.arange(20))  # the trainer sees it
        for bad in [{"offset": room["offset"] + 3, "slots": 1}, {"offset": -8, "slots": 1},
                    {"offset": room["offset"], "slots": True}, {**room, "more": 1}, "room",
                    {"offset": room["offset"], "slots": -1}]:
            with pytest.raises(ProtocolError):
                ctx.placed_room(arg, bad)
        with pytest.raises(SharedMemoryError):
            ctx.placed_room(arg, {"offset": room["offset"], "slots": 1 << 30})
    finally:
        segments.close()
        pool.close()
