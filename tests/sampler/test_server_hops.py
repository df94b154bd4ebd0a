"""``sample_tree``: servers carry a batch's hops among themselves.

Real ``pyg-dist serve`` processes on loopback (started with their peer
list, as ``pyg-dist launch`` starts them) or in-process
:class:`~pyg_dist.server.PartitionServer` objects on real sockets. The
batches must be bit for bit those of hop-by-hop sampling with the same seed
(the coordinator runs the trainer's own hop loop), at every fan-out.
"""

from __future__ import annotations

import contextlib
import logging
import time

import pytest
import torch
from support.servers import serve_parts

from pyg_dist.errors import ProtocolError, RemoteError, RpcError, SamplerError
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.protocol.ops import SAMPLE_TREE
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler
from pyg_dist.server import PartitionServer
from pyg_dist.store.connect import connect

SEEDS = torch.arange(5, 2708, 9)  # 301 seeds all over the graph
_FIELDS = ("node", "row", "col", "edge", "batch", "num_sampled_nodes", "num_sampled_edges")


def _assert_same(a, b) -> None:
    for name in _FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), name
        else:
            assert x == y, name


def _trees(endpoints) -> int:
    with RpcClient(endpoints) as client:
        return sum(client.call(i, "stats").result["sample_tree_calls"]
                   for i in range(len(endpoints)))


@pytest.mark.parametrize("settings", [
    {}, {"replace": True}, {"disjoint": True}, {"subgraph_type": "induced"},
    {"subgraph_type": "bidirectional"},
], ids=["plain", "replace", "disjoint", "induced", "bidirectional"])
def test_tree_batches_equal_hop_by_hop_batches(cora_stores3, served_cora, settings):
    endpoints = cora_stores3[1].router.endpoints
    on_servers = DistNeighborSampler(cora_stores3, [7, 4], seed=0, **settings)
    from_here = DistNeighborSampler(cora_stores3, [7, 4], seed=0, server_hops=False,
                                    **settings)
    assert on_servers.server_hops and not from_here.server_hops
    before = _trees(endpoints)
    for batch_seed in (1, 2, 3, 1 << 61):  # every part coordinates one
        _assert_same(on_servers._sample(SEEDS, seed=batch_seed),
                     from_here._sample(SEEDS, seed=batch_seed))
    # One sample_tree per batch; the hop-by-hop sampler sent none.
    assert _trees(endpoints) == before + 4


def test_loader_batches_are_the_same_on_servers_and_from_here(cora_stores3):
    kwargs = dict(num_neighbors=[10, 5], input_nodes=SEEDS, batch_size=64, seed=3,
                  prefetch=4)
    batches = []
    for server_hops in (True, False):
        loader = DistNeighborLoader(cora_stores3, server_hops=server_hops, **kwargs)
        batches.append(list(loader))
    assert len(batches[0]) == len(batches[1]) == 5
    for a, b in zip(*batches):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id) and torch.equal(a.x, b.x)


def test_two_workers_per_server_and_many_trees_in_flight_do_not_deadlock(cora2_root):
    """A server keeps one of its two workers for plain requests: trees over
    its one slot are refused as busy and asked again, never stuck."""
    with serve_parts(cora2_root, serve_args=["--workers", "2"], forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints, RpcConfig(timeout=20.0))
        try:
            kwargs = dict(num_neighbors=[10, 10], input_nodes=SEEDS, batch_size=16, seed=5,
                          prefetch=12)
            start = time.monotonic()
            tree = list(DistNeighborLoader((fs, gs), **kwargs))
            assert time.monotonic() - start < 20.0
            plain = list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs))
            assert len(tree) == len(plain) == 19
            for a, b in zip(tree, plain):
                assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)
            assert _trees(cluster.endpoints) == 19
        finally:
            fs.close()


@contextlib.contextmanager
def _servers(root, peers_of=None):
    """Both parts of ``root`` in this process; ``peers_of(endpoints)`` gives
    their peer list on first use (``None``: they do not forward)."""
    endpoints: list[str] = []
    peers = None if peers_of is None else (lambda: peers_of(endpoints))
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(PartitionServer(root, part, peers=peers))
                   for part in (0, 1)]
        endpoints += [s.endpoint for s in servers]
        yield endpoints


def test_servers_that_cannot_reach_all_parts_fall_back_to_hop_by_hop(cora2_root, caplog):
    # Their peer list lacks part 1: they say they forward, but cannot.
    with _servers(cora2_root, lambda endpoints: endpoints[:1]) as endpoints:
        fs, gs = connect(endpoints)
        try:
            sampler = DistNeighborSampler((fs, gs), [5, 5], seed=0)
            assert sampler.server_hops
            with caplog.at_level(logging.WARNING, "pyg_dist.sampler.server_hops"):
                out = sampler._sample(SEEDS, seed=4)
            assert not sampler.server_hops
            assert "cannot sample on their own" in caplog.text
            assert "cannot reach its peers" in caplog.text
            _assert_same(out, DistNeighborSampler((fs, gs), [5, 5], server_hops=False)
                         ._sample(SEEDS, seed=4))
        finally:
            fs.close()


def test_server_hops_true_needs_servers_that_forward(cora2_root):
    with _servers(cora2_root) as endpoints:
        fs, gs = connect(endpoints)
        try:
            assert not gs.forwarding
            assert not DistNeighborSampler((fs, gs), [5]).server_hops
            with pytest.raises(SamplerError, match="do not forward"):
                DistNeighborSampler((fs, gs), [5], server_hops=True)
            with RpcClient(endpoints) as client, \
                    pytest.raises(RemoteError, match="does not forward") as info:
                client.call(0, "sample_tree", _tree_args([2], seed=1),
                            [SEEDS[:4]])
            assert info.value.remote_type == "ForwardingError"
        finally:
            fs.close()


def _tree_args(fan_outs, **more):
    """A homogeneous graph's ``sample_tree`` arguments: its one edge type
    and seed type nil."""
    return {"edge_types": [None], "num_neighbors": [fan_outs], "seed_types": [None], **more}


_BAD = [
    (_tree_args([], seed=1), "num_neighbors"),
    (_tree_args([2] * 17, seed=1), "1 to 16 fan-outs"),
    (_tree_args([2, "3"], seed=1), "num_neighbors"),
    (_tree_args([-2], seed=1), "num_neighbors"),
    (_tree_args([2], seed=-1), "'seed'"),
    (_tree_args([2], seed=1, replace=1), "'replace'"),
    (_tree_args([2], seed=1, subgraph="bidirectional"), "'subgraph'"),
    (_tree_args([2], seed=1, timeout=float("inf")), "'timeout'"),
    (_tree_args([2], seed=1, weight_attr="w" * 300), "'weight_attr'"),
    (_tree_args([2], seed=1, weight_attr="no_such"), "no_such"),
    # Settings the coordinator's HopSettings refuses before any hop.
    (_tree_args([2], seed=1, disjoint=True, subgraph="induced"), "refused: disjoint"),
    (_tree_args([2], seed=1, temporal_strategy="last"), "refused: .*needs a time_attr"),
    # A homogeneous graph's tree names its one edge type and seed type nil.
    (_tree_args([2], seed=1, seed_types=["v0"]), "'seed_types'"),
    ({**_tree_args([2], seed=1), "edge_types": [None, None]}, "'edge_types'"),
    ({**_tree_args([2], seed=1, seed_types=["v1"]), "edge_types": [["v0", "e0", "v1"]]},
     "heterogeneous|edge type"),
    (_tree_args([2], seed=1, sizes=[1, 3]), "'sizes'"),
]


def test_malformed_trees_are_refused_and_the_server_keeps_serving(cora2_root):
    with _servers(cora2_root, lambda endpoints: endpoints) as endpoints, \
            RpcClient(endpoints) as client:
        for args, message in _BAD:
            with pytest.raises(RemoteError, match=message):
                client.call(0, "sample_tree", args, [SEEDS[:4]])
        for tensors in ([SEEDS[:4].float()], [SEEDS[:4].view(2, 2)],
                        [SEEDS[:4], SEEDS[:3]], [torch.tensor([10**9])]):
            with pytest.raises(RemoteError):
                client.call(0, "sample_tree", _tree_args([2], seed=1), tensors)
        args = _tree_args([3, 2], seed=7)
        reply = client.call(0, "sample_tree", args, [SEEDS[:4]])
        SAMPLE_TREE.check_reply(reply, args, [SEEDS[:4]], endpoints[0])
        assert torch.equal(reply.tensors[0][:4], SEEDS[:4])


def test_a_lying_tree_is_refused_before_the_sampler_sees_it():
    from pyg_dist.rpc.wire_format import Reply

    args, seeds = _tree_args([2], seed=1), [torch.tensor([4, 9])]
    node = torch.tensor([4, 9, 11])

    def index(*values):  # row and col travel as int32
        return torch.tensor(values, dtype=torch.int32)

    good = [node, index(2), index(0), torch.tensor([77]), torch.tensor([2, 1]),
            torch.tensor([1])]
    SAMPLE_TREE.check_reply(Reply({"node_types": [None]}, list(good)), args, seeds, "x")
    lies = [
        [torch.tensor([9, 4, 11]), *good[1:]],  # seeds not first
        [node, index(3), *good[2:]],  # an edge to no sampled node
        [node, index(-1), *good[2:]],  # a negative index
        [node, good[1], index(0, 1), *good[3:]],  # rows and cols disagree
        [node, torch.tensor([2]), *good[2:]],  # int64 rows
        [*good[:4], torch.tensor([2, 2]), good[5]],  # counts that do not add up
        [*good[:5], torch.tensor([1.0])],  # float counts
        good[:5],  # a tensor short
    ]
    for lie in lies:
        with pytest.raises(ProtocolError, match="sample_tree"):
            SAMPLE_TREE.check_reply(Reply({"node_types": [None]}, lie), args, seeds, "x")


def test_a_dead_peer_fails_the_batch_naming_its_part_within_the_deadline(cora2_root, caplog):
    # Part 0 coordinates in this process (its log is caplog's), part 1 is a
    # real process, killed; the client is told the part, the coordinator's
    # log keeps the address (the cluster's addresses are the operator's).
    with serve_parts(cora2_root, [1], forwarding=True) as cluster:
        endpoints: list[str] = []
        with PartitionServer(cora2_root, 0, peers=lambda: endpoints) as coordinator:
            endpoints += [coordinator.endpoint, cluster.endpoints[0]]
            cluster.set_peers(endpoints)
            fs, gs = connect(endpoints, RpcConfig(timeout=3.0, retries=0))
            try:
                sampler = DistNeighborSampler((fs, gs), [5, 5], seed=0)
                for batch_seed in (1, 2):  # parts 0 and 1 coordinate one each: peers known
                    sampler._sample(SEEDS, seed=batch_seed)
                cluster.processes[0].kill()
                cluster.processes[0].wait(10)
                start = time.monotonic()
                with caplog.at_level(logging.WARNING, "pyg_dist.server.forwarding"), \
                        pytest.raises(RpcError) as info:  # part 0 coordinates, 1 is dead
                    sampler._sample(SEEDS, seed=4)
                assert time.monotonic() - start < 3.0
            finally:
                fs.close()
    assert info.value.address == endpoints[0]  # the coordinator answered
    peer = endpoints[1].split("://", 1)[1]
    assert "part 1" in str(info.value)
    assert peer not in str(info.value) and peer.rsplit(":", 1)[1] not in str(info.value)
    assert peer in caplog.text  # the coordinator's log names the address


def test_peer_addresses_are_hidden_whole_and_only_whole():
    from pyg_dist.server.forwarding import hide_addresses

    parts = {"tcp://10.0.0.5:80": 1, "tcp://10.0.0.6:8080": 2}
    assert hide_addresses("no reply from tcp://10.0.0.5:80 to 'sample'", parts) == \
        "no reply from part 1 to 'sample'"
    assert hide_addresses("10.0.0.6:8080 and 10.0.0.5:8081", parts) == "part 2 and 10.0.0.5:8081"
    assert hide_addresses("nothing here", {}) == "nothing here"


def test_a_tree_too_big_for_one_reply_is_sampled_hop_by_hop(cora2_root, cora_data, caplog):
    from torch_geometric.utils import degree

    deg = degree(cora_data.edge_index[1], cora_data.num_nodes).long()
    edges = int(deg[SEEDS].clamp(max=3).sum())
    # The one hop's answer (8 bytes a seed, 16 an edge) just fits; the tree
    # (8 bytes a node: the seeds and the new ones, 16 an edge) does not.
    config = RpcConfig(max_reply_bytes=8 * (SEEDS.numel() + 2 * edges) + 8)
    with contextlib.ExitStack() as stack:
        endpoints: list[str] = []
        servers = [stack.enter_context(PartitionServer(cora2_root, p, config=config,
                                                       peers=lambda: endpoints))
                   for p in (0, 1)]
        endpoints += [s.endpoint for s in servers]
        fs, gs = connect(endpoints)
        stack.callback(fs.close)
        sampler = DistNeighborSampler((fs, gs), [3], seed=0)
        with caplog.at_level(logging.WARNING, "pyg_dist.sampler.server_hops"):
            out = sampler._sample(SEEDS, seed=8)
        assert "over the reply limit" in caplog.text and not sampler.server_hops
        assert out.edge.numel() == edges
        _assert_same(out, DistNeighborSampler((fs, gs), [3], server_hops=False)
                     ._sample(SEEDS, seed=8))


def test_a_coordinator_stops_at_the_hop_whose_edges_outgrow_one_reply(cora_stores3):
    from pyg_dist.errors import ForwardingError

    sampler = DistNeighborSampler(cora_stores3, [5, 5], seed=0, server_hops=False)
    first_hop = sampler.hop_by_hop(SEEDS, seed=3).num_sampled_edges[0]
    with pytest.raises(ForwardingError, match="first 2 hops sampled"):
        sampler.hop_by_hop(SEEDS, seed=3, max_edges=first_hop)  # hop 1 fits, hop 2 not


@pytest.mark.parametrize("settings", [
    {}, {"replace": True}, {"disjoint": True}, {"subgraph_type": "induced"},
], ids=["plain", "replace", "disjoint", "induced"])
def test_heterogeneous_tree_batches_equal_hop_by_hop_batches(served_hetero, settings):
    stores = served_hetero.get(3)
    on_servers = DistNeighborSampler(stores, [4, 3], seed=0, **settings)
    from_here = DistNeighborSampler(stores, [4, 3], seed=0, server_hops=False, **settings)
    assert on_servers.server_hops and not from_here.server_hops
    endpoints = stores[1].router.endpoints
    before = _trees(endpoints)
    seeds = {"v0": torch.arange(0, 395, 7), "v1": torch.arange(3, 420, 11)}
    for batch_seed in (5, 6, 7):  # every part coordinates one
        a = on_servers._sample_seed_dict(seeds, seed=batch_seed)
        b = from_here._sample_seed_dict(seeds, seed=batch_seed)
        assert list(a.node) == list(b.node) and list(a.row) == list(b.row)
        for name in ("node", "row", "col", "edge", "batch"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None), name
            for key in (x or {}):
                assert torch.equal(x[key], y[key]), (name, key)
        assert a.num_sampled_nodes == b.num_sampled_nodes
        assert a.num_sampled_edges == b.num_sampled_edges
        assert sum(e.numel() for e in a.edge.values()) > 50
    assert _trees(endpoints) == before + 3


def _typed_args(**changes):
    args = {"edge_types": [["v0", "e0", "v1"]], "num_neighbors": [[2]],
            "seed_types": ["v1"], "sizes": [4], "seed": 1}
    return {**args, **changes}


_BAD_TYPED = [
    (_typed_args(edge_types=[["v0", "e0"]]), "'edge_types'"),
    (_typed_args(edge_types=[[["v0"], "e0", "v1"]]), "'edge_types'"),  # nested deeper
    (_typed_args(edge_types=[["v0", "e0", "v1"]] * 4097,  # the decoder's bound
                 num_neighbors=[[2]] * 4097), "4096"),
    (_typed_args(num_neighbors=[[2], [3]]), "one fan-out list per edge type"),
    (_typed_args(edge_types=[["v0", "e0", "v1"], ["v1", "e0", "v2"]],
                 num_neighbors=[[2], [2, 2]]), "same number of hops"),
    (_typed_args(edge_types=[["v0", "e0", "v1"]] * 2, num_neighbors=[[2]] * 2),
     "distinct edge types"),
    (_typed_args(sizes=[5]), "add up to 5 seeds"),  # lying size
    (_typed_args(sizes=[-1]), "'sizes'"),
    (_typed_args(seed_types=["v1", "v1"], sizes=[2, 2]), "'seed_types'"),
    (_typed_args(edge_types=[["v0", "nope", "v1"]]), "no edge type .*nope"),
    # Fan-outs for one edge type only (the graph has six): each needs one.
    (_typed_args(), "no fan-out for edge type"),
]


def test_malformed_heterogeneous_trees_are_refused_and_the_server_keeps_serving(
        served_hetero):
    fs, gs = served_hetero.get(2)
    endpoints = gs.router.endpoints
    seeds = torch.arange(4)
    with RpcClient(endpoints) as client:
        for args, message in _BAD_TYPED:
            with pytest.raises(RemoteError, match=message):
                client.call(0, "sample_tree", args, [seeds])
        with pytest.raises(RemoteError, match="1-D int64"):
            client.call(0, "sample_tree", _typed_args(), [seeds.float()])
        args = _typed_args(edge_types=[list(t) for t in gs.edge_types],
                           num_neighbors=[[3, 2]] * len(gs.edge_types))
        with pytest.raises(RemoteError, match="nope"):  # no such node type
            client.call(0, "sample_tree", {**args, "seed_types": ["nope"]}, [seeds])
        with pytest.raises(RemoteError, match="outside"):  # ids past the type's nodes
            client.call(0, "sample_tree", args, [seeds + 10**6])
        reply = client.call(0, "sample_tree", args, [seeds])
        SAMPLE_TREE.check_reply(reply, args, [seeds], endpoints[0])
        assert reply.result["node_types"] == list(gs.node_types)


def test_a_lying_heterogeneous_tree_is_refused():
    from pyg_dist.rpc.wire_format import Reply

    args = {"edge_types": [["a", "r", "b"]], "num_neighbors": [[1]], "seed_types": ["b"],
            "sizes": [1], "seed": 1}
    seeds = [torch.tensor([7])]
    a, b = torch.tensor([3]), torch.tensor([7])
    row = col = torch.tensor([0], dtype=torch.int32)
    good = [a, b, row, col, torch.tensor([40]), torch.tensor([0, 1, 1, 0]),
            torch.tensor([1])]
    SAMPLE_TREE.check_reply(Reply({"node_types": ["a", "b"]}, list(good)), args,
                                  seeds, "x")
    lies = [
        ({"node_types": ["a"]}, good),  # a type short
        ({"node_types": "ab"}, good),
        ({"node_types": ["a", "b"]}, [torch.tensor([3]), torch.tensor([8]), *good[2:]]),
        ({"node_types": ["a", "b"]}, [*good[:2], torch.tensor([1], dtype=torch.int32),
                                      *good[3:]]),  # a row past the source's nodes
        ({"node_types": ["a", "b"]}, [*good[:5], torch.tensor([1, 1, 1, 0]), good[6]]),
        ({"node_types": ["a", "b"]}, good[:6]),
    ]
    for result, tensors in lies:
        with pytest.raises(ProtocolError, match="sample_tree"):
            SAMPLE_TREE.check_reply(Reply(result, list(tensors)), args, seeds, "x")


def test_a_peer_that_stops_answering_fails_the_batch_within_the_deadline(cora2_root):
    import signal

    with serve_parts(cora2_root, forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints, RpcConfig(timeout=3.0, retries=0))
        stopped = cluster.processes[1]
        try:
            sampler = DistNeighborSampler((fs, gs), [5, 5], seed=0)
            for batch_seed in (1, 2):  # both coordinate once: peers connected
                sampler._sample(SEEDS, seed=batch_seed)
            stopped.send_signal(signal.SIGSTOP)  # alive, connected, never reads
            start = time.monotonic()
            with pytest.raises(RpcError) as info:  # part 0 coordinates
                sampler._sample(SEEDS, seed=4)
            assert time.monotonic() - start < 3.0  # the coordinator's hop deadline
            assert info.value.address == cluster.endpoints[0]
            assert "part 1" in str(info.value)  # the peer by its part, not its address
            assert cluster.endpoints[1].rsplit(":", 1)[1] not in str(info.value)
        finally:
            stopped.send_signal(signal.SIGCONT)
            fs.close()
