"""DistLinkNeighborLoader on Cora served by real partition servers (2 and 3 parts).

Exactness against PyG's LinkNeighborLoader with full fan-out, the invariants
of binary and triplet negatives, their law (chi-square against uniform at
p = 0.001), reproducibility, and typed errors on bad input.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.sampler import NegativeSampling

from pyg_dist.errors import GraphKindMismatchError, LoaderError, SamplerError
from pyg_dist.loader.dist_link_neighbor_loader import DistLinkNeighborLoader

# 302 links spread over the whole graph, in a fixed order.
LINKS = torch.arange(7, 10556, 35)


def _links(data) -> torch.Tensor:
    return data.edge_index[:, LINKS]


def _global_edges(batch) -> set[tuple[int, int, int]]:
    src, dst = batch.n_id[batch.edge_index]
    return set(zip(src.tolist(), dst.tolist(), batch.e_id.tolist()))


def _check_features(data, batch) -> None:
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.train_mask, data.train_mask[batch.n_id])


def _check_edges_exist(data, batch) -> None:
    src, dst = data.edge_index[:, batch.e_id]
    assert torch.equal(batch.n_id[batch.edge_index[0]], src)
    assert torch.equal(batch.n_id[batch.edge_index[1]], dst)


def test_full_fanout_batches_equal_pyg_link_neighbor_loader(cora_data, cora_stores):
    eli = _links(cora_data)
    label = torch.arange(eli.size(1)) % 3
    ours = DistLinkNeighborLoader(cora_stores, num_neighbors=[-1, -1], edge_label_index=eli,
                                  edge_label=label, batch_size=64)
    pyg = LinkNeighborLoader(cora_data, num_neighbors=[-1, -1], edge_label_index=eli,
                             edge_label=label, batch_size=64)
    assert len(ours) == len(pyg) == 5
    for mine, theirs in zip(ours, pyg, strict=True):
        assert set(mine.n_id.tolist()) == set(theirs.n_id.tolist())
        assert _global_edges(mine) == _global_edges(theirs)
        # Labelled pairs, in global ids and in input order, and their labels.
        assert torch.equal(mine.n_id[mine.edge_label_index],
                           theirs.n_id[theirs.edge_label_index])
        assert torch.equal(mine.edge_label, theirs.edge_label)
        assert torch.equal(mine.input_id, theirs.input_id)
        if "num_sampled_nodes" in theirs:  # not on PyG's torch-sparse path
            assert mine.num_sampled_nodes == theirs.num_sampled_nodes
        assert sum(mine.num_sampled_nodes) == mine.num_nodes
        _check_features(cora_data, mine)


def test_all_edges_by_default_with_prefetch(cora_data, cora_stores3):
    loader = DistLinkNeighborLoader(cora_stores3, num_neighbors=[2], batch_size=2048,
                                    prefetch=2, seed=0)
    seen = []
    for batch in loader:
        seen.append(batch.n_id[batch.edge_label_index])
        _check_edges_exist(cora_data, batch)
    assert torch.equal(torch.cat(seen, dim=1), cora_data.edge_index)


@pytest.mark.parametrize("amount", [1, 2.5])
def test_binary_negatives_are_labelled_zero_and_joined_with_features(cora_data, cora_stores,
                                                                     amount):
    eli = _links(cora_data)
    loader = DistLinkNeighborLoader(cora_stores, num_neighbors=[3, 2], edge_label_index=eli,
                                    neg_sampling=NegativeSampling("binary", amount),
                                    batch_size=64, seed=1)
    start = 0
    for batch in loader:
        num_pos = batch.input_id.numel()
        num_neg = math.ceil(num_pos * amount)
        assert batch.edge_label_index.shape == (2, num_pos + num_neg)
        assert torch.equal(batch.edge_label, torch.cat([torch.ones(num_pos),
                                                        torch.zeros(num_neg)]))
        assert batch.edge_label.dtype == torch.float
        pairs = batch.n_id[batch.edge_label_index]
        assert torch.equal(pairs[:, :num_pos], eli[:, start:start + num_pos])
        assert torch.equal(batch.input_id, torch.arange(start, start + num_pos))
        assert int(batch.edge_label_index.max()) < batch.num_nodes
        _check_features(cora_data, batch)
        _check_edges_exist(cora_data, batch)
        start += num_pos
    assert start == eli.size(1)


def test_multiclass_labels_are_shifted_as_pyg_does(cora_data, cora_stores3):
    eli = _links(cora_data)[:, :40]
    label = torch.arange(40) % 4
    batch = next(iter(DistLinkNeighborLoader(cora_stores3, num_neighbors=[1],
                                             edge_label_index=eli, edge_label=label,
                                             neg_sampling="binary", batch_size=40, seed=0)))
    assert torch.equal(batch.edge_label, torch.cat([label + 1, torch.zeros(40, dtype=torch.long)]))


@pytest.mark.parametrize("amount", [1, 3])
def test_triplet_indices_point_into_the_batch(cora_data, cora_stores, amount):
    eli = _links(cora_data)
    loader = DistLinkNeighborLoader(cora_stores, num_neighbors=[2], edge_label_index=eli,
                                    neg_sampling=NegativeSampling("triplet", amount),
                                    batch_size=50, seed=2)
    start = 0
    for batch in loader:
        num_pos = batch.input_id.numel()
        assert torch.equal(batch.n_id[batch.src_index], eli[0, start:start + num_pos])
        assert torch.equal(batch.n_id[batch.dst_pos_index], eli[1, start:start + num_pos])
        expected = (num_pos,) if amount == 1 else (num_pos, amount)
        assert batch.dst_neg_index.shape == expected
        assert int(batch.dst_neg_index.max()) < batch.num_nodes
        assert "edge_label_index" not in batch and "edge_label" not in batch
        _check_features(cora_data, batch)
        start += num_pos
    assert start == eli.size(1)


def _negatives(stores, seed: int, amount: int = 3, mode: str = "triplet") -> torch.Tensor:
    loader = DistLinkNeighborLoader(stores, num_neighbors=[0], batch_size=4096,
                                    neg_sampling=NegativeSampling(mode, amount), seed=seed)
    out = []
    for batch in loader:
        if mode == "triplet":
            out.append(batch.n_id[batch.dst_neg_index].view(-1))
        else:
            num_pos = batch.input_id.numel()
            out.append(batch.n_id[batch.edge_label_index[:, num_pos:]].view(-1))
    return torch.cat(out)


def test_negative_destinations_are_uniform_chi_square(cora_data, cora_stores3):
    neg = _negatives(cora_stores3, seed=3)  # 31,668 draws over 2,708 nodes
    n = cora_data.num_nodes
    assert neg.numel() == 3 * cora_data.num_edges
    counts = torch.bincount(neg, minlength=n).double()
    expected = neg.numel() / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # Upper 0.001 quantile of chi-square with n - 1 degrees of freedom
    # (Wilson-Hilferty; exact to well under 1% at this many degrees).
    df = n - 1
    z = 3.090232
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    assert chi2 < critical, (chi2, critical)
    # Binary negatives draw both endpoints from the same law.
    both = _negatives(cora_stores3, seed=4, mode="binary")
    counts = torch.bincount(both, minlength=n).double()
    expected = both.numel() / n
    assert float(((counts - expected) ** 2 / expected).sum()) < critical


def test_negatives_are_reproducible_from_the_seed(cora_stores3):
    a, b = _negatives(cora_stores3, seed=5, amount=1), _negatives(cora_stores3, seed=5, amount=1)
    assert torch.equal(a, b)
    assert not torch.equal(a, _negatives(cora_stores3, seed=6, amount=1))


def test_weighted_negatives_follow_dst_weight(cora_data, cora_stores3):
    weight = torch.zeros(cora_data.num_nodes)
    weight[[5, 17, 2000]] = 1.0
    loader = DistLinkNeighborLoader(
        cora_stores3, num_neighbors=[0], edge_label_index=_links(cora_data),
        neg_sampling=NegativeSampling("triplet", 2, dst_weight=weight), batch_size=100, seed=0)
    negs = torch.cat([b.n_id[b.dst_neg_index].view(-1) for b in loader])
    assert set(negs.tolist()) == {5, 17, 2000}


@pytest.mark.parametrize("eli, match", [
    (torch.tensor([[0, 1], [2, 2708]]), r"outside \[0, 2708\).*max 2708"),
    (torch.tensor([[0, -1], [2, 3]]), r"outside \[0, 2708\).*min -1"),
    (torch.tensor([[0.0, 1.0], [2.0, 3.0]]), "integer node ids.*float"),
    (torch.tensor([[True, False], [False, True]]), "integer node ids.*bool"),
    (torch.tensor([0, 1, 2]), r"shape \[2, E\].*\(3,\)"),
    (torch.zeros(3, 4, dtype=torch.long), r"shape \[2, E\].*\(3, 4\)"),
    (torch.zeros(2, 0, dtype=torch.long), "no links"),
])
def test_bad_edge_label_index_raises_typed_errors(cora_stores3, eli, match):
    with pytest.raises(LoaderError, match=match):
        DistLinkNeighborLoader(cora_stores3, num_neighbors=[1], edge_label_index=eli)


@pytest.mark.parametrize("eli", [
    (("paper", "cites", "paper"), torch.zeros(2, 3, dtype=torch.long)),
    "cites",
])
def test_an_edge_type_on_a_homogeneous_graph_is_refused(cora_stores3, eli):
    with pytest.raises(GraphKindMismatchError, match="homogeneous graph, which has no edge type"):
        DistLinkNeighborLoader(cora_stores3, num_neighbors=[1], edge_label_index=eli)


def test_bad_labels_and_negative_sampling_raise_typed_errors(cora_data, cora_stores3):
    eli = _links(cora_data)[:, :10]
    kw = dict(num_neighbors=[1], edge_label_index=eli)
    with pytest.raises(LoaderError, match=r"one entry per seed link \(10\).*\(9,\)"):
        DistLinkNeighborLoader(cora_stores3, edge_label=torch.ones(9), **kw)
    with pytest.raises(LoaderError, match="triplet"):
        DistLinkNeighborLoader(cora_stores3, edge_label=torch.ones(10), neg_sampling="triplet",
                               **kw)
    with pytest.raises(LoaderError, match="neg_sampling"):
        DistLinkNeighborLoader(cora_stores3, neg_sampling="ternary", **kw)
    with pytest.raises(LoaderError, match="neg_sampling"):
        DistLinkNeighborLoader(cora_stores3, neg_sampling_ratio=-1, **kw)
    with pytest.raises(SamplerError, match="dst_weight.*2708"):
        DistLinkNeighborLoader(cora_stores3, neg_sampling=NegativeSampling(
            "binary", dst_weight=torch.ones(5)), **kw)
    with pytest.raises(LoaderError, match="needs both time_attr.*got only edge_label_time"):
        DistLinkNeighborLoader(cora_stores3, edge_label_time=torch.zeros(10), **kw)


def test_negative_sampling_without_nodes_names_the_problem():
    from pyg_dist.sampler.link_sampling import SeededNegativeSampling, check_negative_sampling

    with pytest.raises(SamplerError, match="has none"):
        check_negative_sampling(NegativeSampling("binary"), 0)
    with pytest.raises(SamplerError, match="nodes to draw dst endpoints"):
        SeededNegativeSampling(NegativeSampling("triplet"), seed=0).sample(4, "dst", 0)


def test_pyg_own_loaders_refuse_our_sampler_instead_of_returning_wrong_batches(cora_data,
                                                                                cora_stores3):
    # PyG's loaders take the features of a sampler class *named*
    # DistNeighborSampler from metadata[-3:]; that used to give x = the int64
    # edge_label_index (LinkLoader) or a bare IndexError (NodeLoader).
    from torch_geometric.loader import NeighborLoader

    from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler

    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[2], seed=0)
    link = LinkNeighborLoader(cora_stores3, num_neighbors=[2], neighbor_sampler=sampler,
                              edge_label_index=(None, _links(cora_data)), batch_size=8)
    with pytest.raises(SamplerError, match="DistLinkNeighborLoader"):
        next(iter(link))
    link = LinkNeighborLoader(cora_stores3, num_neighbors=[2], neighbor_sampler=sampler,
                              edge_label_index=(None, _links(cora_data)), batch_size=8,
                              neg_sampling="triplet", filter_per_worker=False)
    with pytest.raises(SamplerError, match="metadata"):
        next(iter(link))
    node = NeighborLoader(cora_stores3, num_neighbors=[2], neighbor_sampler=sampler,
                          input_nodes=torch.arange(16), batch_size=8)
    with pytest.raises(SamplerError, match="DistNeighborLoader"):
        next(iter(node))
    # Our own loaders read the same outputs from the front and are unaffected.
    batch = next(iter(DistLinkNeighborLoader(cora_stores3, neighbor_sampler=sampler,
                                             edge_label_index=_links(cora_data),
                                             batch_size=8)))
    _check_features(cora_data, batch)


def test_split_false_gives_every_rank_all_links(cora_data, cora_stores3):
    eli = _links(cora_data)
    kw = dict(num_neighbors=[0], edge_label_index=eli, batch_size=64)
    shares = [DistLinkNeighborLoader(cora_stores3, rank=r, world_size=2, **kw) for r in (0, 1)]
    ids = [torch.cat([b.input_id for b in loader]) for loader in shares]
    assert ids[0].numel() == ids[1].numel() == 151
    assert set(ids[0].tolist()) | set(ids[1].tolist()) == set(range(302))
    whole = DistLinkNeighborLoader(cora_stores3, rank=1, world_size=2, split=False,
                                   generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(torch.cat([b.input_id for b in whole]), torch.arange(302))
    assert "split=False" in repr(whole)


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_worker_processes_cover_every_link_with_features(cora_data, cora_stores3,
                                                         filter_per_worker):
    eli = _links(cora_data)
    loader = DistLinkNeighborLoader(cora_stores3, num_neighbors=[2], edge_label_index=eli,
                                    neg_sampling="triplet", batch_size=64, num_workers=2,
                                    multiprocessing_context="fork",
                                    filter_per_worker=filter_per_worker, seed=0)
    src = []
    for batch in loader:
        src.append(batch.n_id[batch.src_index])
        _check_features(cora_data, batch)
    assert torch.equal(torch.cat(src), eli[0])


def test_dataloader_and_sampler_arguments_are_checked_as_in_the_node_loader(cora_data,
                                                                             cora_stores3):
    eli = _links(cora_data)
    kw = dict(num_neighbors=[1], edge_label_index=eli)
    with pytest.raises(LoaderError, match="does not take input_id=.*edge_label_index"):
        DistLinkNeighborLoader(cora_stores3, input_id=torch.arange(eli.size(1)), **kw)
    with pytest.raises(LoaderError, match="does not take collate_fn="):
        DistLinkNeighborLoader(cora_stores3, collate_fn=list, **kw)
    with pytest.raises(LoaderError, match="prefetch.*num_workers"):
        DistLinkNeighborLoader(cora_stores3, prefetch=2, num_workers=2, **kw)
    with pytest.raises(LoaderError, match="temporal_strategy"):
        DistLinkNeighborLoader(cora_stores3, temporal_strategy="last", **kw)
    with pytest.raises(LoaderError, match="2 inputs.*3 ranks.*split=False"):
        DistLinkNeighborLoader(cora_stores3, num_neighbors=[1], edge_label_index=eli[:, :2],
                               rank=0, world_size=3)
    with pytest.raises(LoaderError, match="pyg_dist.connect"):
        DistLinkNeighborLoader(cora_data, **kw)
