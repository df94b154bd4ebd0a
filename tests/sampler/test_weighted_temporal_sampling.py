"""Weighted and temporal sampling through real ``pyg-dist serve`` processes.

The oracle is :class:`ReferenceSampler` below: a plain-Python walk over the
whole in-memory graph that follows PyG's documented semantics (PyG's own
weighted and temporal sampling need pyg-lib, which is not installable here):
temporal sampling is disjoint, every seed grows its own tree, a node is
expanded once per tree, and only in-edges whose time (the source node's, or
the edge's own) is at most the seed's time are followed. Distributions are
checked with a chi-square statistic at p = 0.001.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import pytest
import torch
from support.one_hop import one_hop
from support.servers import serve_parts
from torch_geometric.data import Data

from pyg_dist.errors import LoaderError, RemoteError, SamplerError
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.sampler import DistNeighborSampler
from pyg_dist.store.connect import connect

# chi-square critical values at p = 0.001, by degrees of freedom.
CRITICAL_001 = {4: 18.47, 9: 27.88}
HUB, HUB_SOURCES = 0, [1, 2, 3, 4, 5, 6]
HUB_WEIGHTS = [0.0, 1.0, 2.0, 3.0, 4.0, 10.0]
NUM_NODES = 300


def _graph() -> Data:
    """A random graph with times and weights, and a hub (node 0) whose six
    in-edges have known weights (one of them 0)."""
    gen = torch.Generator().manual_seed(7)
    num_random = 3000
    src = torch.randint(0, NUM_NODES, (num_random,), generator=gen)
    dst = torch.randint(1, NUM_NODES, (num_random,), generator=gen)  # never the hub
    src = torch.cat([torch.tensor(HUB_SOURCES), src])
    dst = torch.cat([torch.full((len(HUB_SOURCES),), HUB), dst])
    num_edges = src.numel()
    weight = torch.rand(num_edges, generator=gen) * 2
    weight[torch.rand(num_edges, generator=gen) < 0.2] = 0.0
    weight[:len(HUB_SOURCES)] = torch.tensor(HUB_WEIGHTS)
    negative = weight.clone()
    negative[10] = -1.0
    nan = weight.clone()
    nan[11] = math.nan
    # Few distinct times, so that ties (the later edge wins under 'last') occur.
    time = torch.randint(0, 30, (NUM_NODES,), generator=gen)
    return Data(x=torch.randn(NUM_NODES, 4, generator=gen),
                y=torch.randint(0, 3, (NUM_NODES,), generator=gen),
                time=time, ftime=time.float(),
                edge_index=torch.stack([src, dst]), edge_weight=weight,
                edge_time=torch.randint(0, 30, (num_edges,), generator=gen),
                edge_negative=negative, edge_nan=nan, num_nodes=NUM_NODES)


@pytest.fixture(scope="module")
def graph() -> Data:
    return _graph()


@pytest.fixture(scope="module")
def served(graph, tmp_path_factory):
    """``{num_parts: (fs, gs)}`` for 2 and 3 parts, servers stopped at the end;
    the servers sample a batch's hops among themselves (``sample_tree``), so
    every sampler test here runs through them."""
    with contextlib.ExitStack() as stack:
        stores = {}
        for num_parts in (2, 3):
            root = tmp_path_factory.mktemp(f"timed{num_parts}")
            partition(graph, num_parts, root)
            cluster = stack.enter_context(serve_parts(root, forwarding=True))
            fs, gs = connect(cluster.endpoints)
            stack.callback(fs.close)
            stores[num_parts] = (fs, gs)
        yield stores


class ReferenceSampler:
    """Temporal sampling over the whole graph in plain Python, one seed at a time."""

    def __init__(self, data: Data, time_attr: str) -> None:
        src, dst = data.edge_index.tolist()
        self.incoming: dict[int, list[tuple[int, int]]] = {}
        for e, (u, v) in enumerate(zip(src, dst)):
            self.incoming.setdefault(v, []).append((e, u))  # edge-id (input) order
        self.node_time = data.time.tolist()
        self.edge_time = data.edge_time.tolist() if time_attr == "edge_time" else None

    def entry_time(self, edge: int, source: int) -> int:
        return self.node_time[source] if self.edge_time is None else self.edge_time[edge]

    def eligible(self, node: int, seed_time: int) -> list[tuple[int, int]]:
        """In-edges ``(edge, source)`` of ``node`` no later than ``seed_time``."""
        return [(e, u) for e, u in self.incoming.get(node, [])
                if self.entry_time(e, u) <= seed_time]

    def most_recent(self, node: int, seed_time: int, k: int) -> set[int]:
        """Edge ids of the ``k`` latest eligible in-edges (ties: the later edge)."""
        ranked = sorted(self.eligible(node, seed_time),
                        key=lambda eu: (self.entry_time(*eu), eu[0]), reverse=True)
        return {e for e, _ in ranked[:k]}

    def full(self, seed: int, seed_time: int, hops: int) -> tuple[set[int], set[tuple]]:
        """Node set and ``(src, dst, edge)`` set of one seed's tree at fan-out -1."""
        nodes, edges, frontier = {seed}, set(), [seed]
        for _ in range(hops):
            new = []
            for v in frontier:
                for e, u in self.eligible(v, seed_time):
                    edges.add((u, v, e))
                    if u not in nodes:
                        nodes.add(u)
                        new.append(u)
            frontier = new
        return nodes, edges


def _per_seed(out, num_seeds: int) -> list[tuple[set[int], set[tuple]]]:
    node, batch = out.node.tolist(), out.batch.tolist()
    trees = [(set(), set()) for _ in range(num_seeds)]
    for n, b in zip(node, batch):
        trees[b][0].add(n)
    for r, c, e in zip(out.row.tolist(), out.col.tolist(), out.edge.tolist()):
        assert batch[r] == batch[c]  # an edge never joins two seeds' trees
        trees[batch[c]][1].add((node[r], node[c], e))
    return trees


def _seeds(graph: Data, count: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    seeds = torch.randint(0, NUM_NODES, (count,), generator=gen)
    seeds[:3] = torch.tensor([HUB, HUB, 5])  # one seed twice: two trees
    return seeds, torch.randint(0, 30, (count,), generator=gen)


# Exactness ##################################################################


@pytest.mark.parametrize("settings", [
    {"weight_attr": "edge_weight"}, {"weight_attr": "edge_weight", "replace": True},
    {"time_attr": "time"}, {"time_attr": "edge_time", "temporal_strategy": "last"},
], ids=["weighted", "weighted-replace", "node-time", "edge-time-last"])
def test_server_hops_draw_the_batches_of_hop_by_hop(graph, served, settings):
    seeds, times = _seeds(graph)
    times = times if "time_attr" in settings else None
    tree = DistNeighborSampler(served[3], num_neighbors=[3, 2], seed=1, **settings)
    hops = DistNeighborSampler(served[3], num_neighbors=[3, 2], seed=1, server_hops=False,
                               **settings)
    assert tree.server_hops and not hops.server_hops
    for batch_seed in (10, 11, 12):  # each part coordinates one
        a, b = tree._sample(seeds, times, seed=batch_seed), \
            hops._sample(seeds, times, seed=batch_seed)
        for name in ("node", "row", "col", "edge", "batch"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or torch.equal(x, y), name
        assert a.num_sampled_edges == b.num_sampled_edges and a.edge.numel() > 40


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("time_attr", ["time", "edge_time"])
def test_temporal_full_fanout_equals_the_reference(graph, served, num_parts, time_attr):
    reference = ReferenceSampler(graph, time_attr)
    seeds, times = _seeds(graph)
    sampler = DistNeighborSampler(served[num_parts], num_neighbors=[-1, -1], seed=1,
                                  time_attr=time_attr)
    assert sampler.is_temporal and sampler.disjoint
    out = sampler._sample(seeds, times)
    assert out.batch is not None and out.node[:seeds.numel()].tolist() == seeds.tolist()
    trees = _per_seed(out, seeds.numel())
    for i, (seed, t) in enumerate(zip(seeds.tolist(), times.tolist())):
        assert trees[i] == reference.full(seed, t, hops=2), f"seed {i} (node {seed}, time {t})"
    # No future neighbour anywhere.
    entry = graph.time[out.node[out.row]] if time_attr == "time" else graph.edge_time[out.edge]
    assert bool((entry <= times[out.batch[out.col]]).all())
    assert sum(len(e) for _, e in trees) > 200  # the test saw real trees


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("time_attr", ["time", "edge_time"])
def test_last_strategy_takes_exactly_the_most_recent(graph, served, num_parts, time_attr):
    reference = ReferenceSampler(graph, time_attr)
    seeds, times = _seeds(graph)
    k = 2
    sampler = DistNeighborSampler(served[num_parts], num_neighbors=[k, k], seed=2,
                                  time_attr=time_attr, temporal_strategy="last")
    out = sampler._sample(seeds, times)
    node, batch = out.node, out.batch
    picked: dict[tuple[int, int], set[int]] = {}
    for c, e in zip(out.col.tolist(), out.edge.tolist()):
        picked.setdefault((int(batch[c]), c), set()).add(e)
    # Every expanded node (seeds and hop-1 nodes) took exactly its k latest.
    expanded = range(seeds.numel() + out.num_sampled_nodes[1])
    for c in expanded:
        b = int(batch[c])
        want = reference.most_recent(int(node[c]), int(times[b]), k)
        assert picked.get((b, c), set()) == want, f"node {int(node[c])} of seed {b}"
    assert sum(len(v) for v in picked.values()) > 50


def test_loader_batches_carry_batch_and_seed_time(graph, served):
    seeds, times = _seeds(graph, 12)
    loader = DistNeighborLoader(served[2], num_neighbors=[-1], input_nodes=seeds,
                                input_time=times, time_attr="time", batch_size=12, seed=0)
    batch = next(iter(loader))
    assert torch.equal(batch.seed_time, times)
    assert torch.equal(batch.batch[:12], torch.arange(12))
    assert torch.equal(batch.x, graph.x[batch.n_id])
    # Seeds may be later than their own time; every sampled node is not.
    assert bool((graph.time[batch.n_id[12:]] <= times[batch.batch[12:]]).all())
    # Without input_time a node time_attr uses every seed's own time (PyG's way).
    own = DistNeighborLoader(served[2], num_neighbors=[-1], input_nodes=seeds,
                             time_attr="time", batch_size=12, seed=0)
    batch = next(iter(own))
    assert bool((graph.time[batch.n_id] <= graph.time[seeds][batch.batch]).all())
    assert batch.n_id.numel() > 12


# Distribution ###############################################################


def _chi_square(observed: torch.Tensor, expected: torch.Tensor) -> float:
    observed, expected = observed.double(), expected.double()
    return float(((observed - expected) ** 2 / expected).sum())


def _hub_draws(gs, k: int, replace: bool, draws: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((draws,), HUB, dtype=torch.long)
    counts, nbrs, _ = one_hop(gs, ids, k, replace, 11, weight_attr="edge_weight")
    return counts, nbrs


@pytest.mark.parametrize("num_parts", [2, 3])
def test_weighted_one_draw_follows_the_weights(served, num_parts):
    draws = 20000
    counts, nbrs = _hub_draws(served[num_parts][1], 1, False, draws)
    assert counts.tolist() == [1] * draws
    observed = torch.bincount(nbrs, minlength=7)[HUB_SOURCES]
    assert observed[0] == 0  # weight 0: never drawn
    weight = torch.tensor(HUB_WEIGHTS[1:])
    assert _chi_square(observed[1:], weight / weight.sum() * draws) < CRITICAL_001[4]
    assert _chi_square(observed[1:], torch.full((5,), draws / 5)) > 10 * CRITICAL_001[4]


@pytest.mark.parametrize("num_parts", [2, 3])
def test_weighted_without_replacement_draws_successively(served, num_parts):
    # Two draws without replacement: the pair {i, j} comes up with
    # probability w_i/W * w_j/(W - w_i) + w_j/W * w_i/(W - w_j).
    draws = 20000
    counts, nbrs = _hub_draws(served[num_parts][1], 2, False, draws)
    assert counts.tolist() == [2] * draws
    pairs = nbrs.view(-1, 2).sort(dim=1).values
    assert bool((pairs[:, 0] != pairs[:, 1]).all()) and int((nbrs == 1).sum()) == 0
    weights = dict(zip(HUB_SOURCES, HUB_WEIGHTS))
    total = sum(HUB_WEIGHTS)
    observed, expected = [], []
    for i, j in itertools.combinations(HUB_SOURCES[1:], 2):
        wi, wj = weights[i], weights[j]
        expected.append(draws * (wi / total * wj / (total - wi) + wj / total * wi / (total - wj)))
        observed.append(int(((pairs[:, 0] == i) & (pairs[:, 1] == j)).sum()))
    assert _chi_square(torch.tensor(observed), torch.tensor(expected)) < CRITICAL_001[9]


@pytest.mark.parametrize("num_parts", [2, 3])
def test_weighted_with_replacement_draws_independently(served, num_parts):
    draws = 6000
    counts, nbrs = _hub_draws(served[num_parts][1], 3, True, draws)
    assert counts.tolist() == [3] * draws
    observed = torch.bincount(nbrs, minlength=7)[HUB_SOURCES]
    assert observed[0] == 0
    weight = torch.tensor(HUB_WEIGHTS[1:])
    assert _chi_square(observed[1:], weight / weight.sum() * 3 * draws) < CRITICAL_001[4]


def test_weight_zero_edges_are_never_drawn_anywhere(graph, served):
    fs, gs = served[3]
    ids = torch.arange(NUM_NODES)
    for k, replace in ((-1, False), (3, False), (3, True)):
        _, _, eids = one_hop(gs, ids, k, replace, 5, weight_attr="edge_weight")
        assert eids.numel() > 0 and bool((graph.edge_weight[eids] > 0).all())
    # At full fan-out: exactly the positive-weight in-edges.
    _, _, eids = one_hop(gs, ids, -1, False, 5, weight_attr="edge_weight")
    assert sorted(eids.tolist()) == (graph.edge_weight > 0).nonzero().view(-1).tolist()


# Bad input ##################################################################


@pytest.mark.parametrize("settings, match", [
    ({"weight_attr": "edge_missing"}, "weight_attr 'edge_missing' is not an edge attribute"),
    ({"weight_attr": "edge_negative"}, "weight_attr 'edge_negative' holds .* negative, NaN"),
    ({"weight_attr": "edge_nan"}, "weight_attr 'edge_nan' holds .* negative, NaN"),
    ({"time_attr": "missing"}, "time_attr 'missing' is neither a node nor an edge"),
    ({"time_attr": "ftime"}, "time_attr 'ftime' must hold integer times"),
    ({"time_attr": "time", "temporal_strategy": "last", "replace": True}, "replacement"),
])
def test_bad_attributes_are_typed_errors_naming_them(served, settings, match):
    with pytest.raises(SamplerError, match=match):
        DistNeighborSampler(served[2], num_neighbors=[2], **settings)
    with pytest.raises(LoaderError, match=match):
        DistNeighborLoader(served[2], num_neighbors=[2], batch_size=4, **settings)


def test_bad_input_time_is_a_loader_error(served):
    seeds = torch.arange(10)
    with pytest.raises(LoaderError, match="one time per seed \\(10\\), got 9"):
        DistNeighborLoader(served[2], num_neighbors=[2], input_nodes=seeds,
                           input_time=torch.zeros(9, dtype=torch.long), time_attr="time")
    with pytest.raises(LoaderError, match="input_time .* integer tensor, got torch.float32"):
        DistNeighborLoader(served[2], num_neighbors=[2], input_nodes=seeds,
                           input_time=torch.zeros(10), time_attr="time")
    sampler = DistNeighborSampler(served[2], num_neighbors=[2], time_attr="edge_time")
    with pytest.raises(SamplerError, match="edge time: pass input_time"):
        sampler._sample(seeds)


def test_the_server_refuses_malformed_seed_times_and_keeps_serving(served):
    fs, gs = served[2]
    router = gs.router
    owned = gs.book.split(torch.arange(NUM_NODES))[0][2][:5]
    args = {"edge_types": [None], "num_neighbors": 2, "time_attr": "time"}
    for tensors, match in (([owned], "takes 2 tensor"),
                           ([owned, torch.zeros(4, dtype=torch.long)], "4 seed times for 5"),
                           ([owned, torch.zeros(5, dtype=torch.int32)], "1-D int64")):
        with pytest.raises(RemoteError, match=match):
            router.call_all([(0, "sample", args, tensors)])
    with pytest.raises(RemoteError, match="'last' needs a time_attr"):
        router.call_all([(0, "sample", {"edge_types": [None], "num_neighbors": 2,
                                        "weight_attr": "edge_weight",
                                        "temporal_strategy": "last"}, [owned])])
    reply = router.call_all([(0, "sample", args, [owned, torch.zeros(5, dtype=torch.long)])])
    assert reply[0].result["time_kind"] == "node"


def test_seed_links_with_times_sample_only_their_past(graph, served):
    from torch_geometric.sampler import EdgeSamplerInput

    sampler = DistNeighborSampler(served[3], num_neighbors=[-1, -1], seed=4, time_attr="time")
    src, dst = torch.tensor([3, 17, HUB]), torch.tensor([40, 5, 9])
    times = torch.tensor([10, 20, 29])
    out = sampler.sample_from_edges(EdgeSamplerInput(None, src, dst, time=times))
    # Disjoint: the source and the destination of link i grow one tree each
    # at times[i], both reported as batch i (PyG's edge_sample: batch % links).
    assert out.node[:6].tolist() == src.tolist() + dst.tolist()
    assert bool((graph.time[out.node[out.row]] <= times[out.batch[out.col]]).all())
    reference = ReferenceSampler(graph, "time")
    trees = _per_seed(out, 3)
    for i, t in enumerate(times.tolist()):
        (n1, e1), (n2, e2) = (reference.full(int(v), t, hops=2) for v in (src[i], dst[i]))
        assert trees[i] == (n1 | n2, e1 | e2)


@pytest.mark.parametrize("path", [{"prefetch": 2}, {"num_workers": 2}],
                         ids=["prefetch", "workers"])
def test_every_loader_path_samples_temporally_and_by_weight(graph, served, path):
    seeds, times = _seeds(graph, 24)
    settings = dict(num_neighbors=[3, 2], input_nodes=seeds, input_time=times,
                    time_attr="edge_time", weight_attr="edge_weight", batch_size=8, seed=5)
    sync = list(DistNeighborLoader(served[2], **settings))
    other = list(DistNeighborLoader(served[2], **settings, **path))
    assert len(sync) == len(other) == 3
    for a, b in zip(sync, other):
        # Worker processes draw their own randomness (docs/loader.md); threads
        # reproduce the synchronous batches exactly.
        if "prefetch" in path:
            assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)
            assert torch.equal(a.batch, b.batch)
        assert torch.equal(a.seed_time, b.seed_time) and b.e_id.numel() > 0
        assert bool((graph.edge_time[b.e_id] <= b.seed_time[b.batch[b.edge_index[1]]]).all())
        assert bool((graph.edge_weight[b.e_id] > 0).all())


def test_link_loader_samples_by_weight_and_never_takes_a_weight_zero_edge(graph, served):
    from pyg_dist.loader import DistLinkNeighborLoader

    links = graph.edge_index[:, graph.edge_weight > 0][:, :64]
    loader = DistLinkNeighborLoader(served[2], num_neighbors=[-1, -1], edge_label_index=links,
                                    neg_sampling="binary", batch_size=32, seed=3,
                                    weight_attr="edge_weight")
    sampled = torch.cat([batch.e_id for batch in loader])
    assert sampled.numel() > 0
    assert bool((graph.edge_weight[sampled] > 0).all())
    with pytest.raises(LoaderError, match="edge_w"):
        DistLinkNeighborLoader(served[2], num_neighbors=[2], edge_label_index=links,
                               batch_size=32, weight_attr="edge_w")


def test_link_loader_samples_each_link_in_its_past(graph, served):
    from pyg_dist.loader import DistLinkNeighborLoader

    links = torch.tensor([[3, 17, HUB, 50], [40, 5, 9, 51]])
    times = torch.tensor([10, 20, 29, 3])
    reference = ReferenceSampler(graph, "time")
    loader = DistLinkNeighborLoader(served[3], num_neighbors=[-1, -1], edge_label_index=links,
                                    edge_label_time=times, time_attr="time", batch_size=4,
                                    seed=4)
    batch = next(iter(loader))
    assert torch.equal(batch.edge_label_time, times)
    # Every sampled edge's source is no later than the time of its tree's link.
    src_time = graph.time[batch.n_id[batch.edge_index[0]]]
    assert bool((src_time <= times[batch.batch[batch.edge_index[1]] % 4]).all())
    for i, t in enumerate(times.tolist()):
        in_tree = batch.n_id[batch.batch % 4 == i]
        expected = set()
        for v in links[:, i].tolist():
            expected |= reference.full(v, t, hops=2)[0]
        assert set(in_tree.tolist()) == expected
    with pytest.raises(LoaderError, match="edge_label_time.*one time per seed \\(4\\), got 3"):
        DistLinkNeighborLoader(served[3], num_neighbors=[2], edge_label_index=links,
                               edge_label_time=times[:3], time_attr="time", batch_size=4)
