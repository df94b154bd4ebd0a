"""The pure relabel / reassemble logic of the distributed sampler, on plain tensors."""

from __future__ import annotations

import torch

from pyg_dist.sampler.relabel import NodeIndex, reassemble, segment_gather_index


def _reference_relabel(nodes: list[int], keys: list[int]) -> tuple[list[int], list[int]]:
    """Dictionary-based relabelling, the way pyg-lib's mapper does it."""
    to_local = {}
    for i, n in enumerate(nodes):
        to_local.setdefault(n, i)
    out, new = [], []
    for k in keys:
        if k not in to_local:
            to_local[k] = len(nodes) + len(new)
            new.append(k)
        out.append(to_local[k])
    return out, new


def test_node_index_matches_dictionary_relabel_over_hops():
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randint(0, 50, (20,), generator=gen)  # with repeats
    index = NodeIndex(seeds)
    nodes = seeds.tolist()
    for _ in range(3):
        keys = torch.randint(0, 200, (300,), generator=gen)
        local, new = index.add(keys)
        ref_local, ref_new = _reference_relabel(nodes, keys.tolist())
        assert local.tolist() == ref_local
        assert new.tolist() == ref_new
        nodes += ref_new
        assert index.num_nodes == len(nodes)


def test_node_index_seeds_keep_their_positions_and_empty_input():
    index = NodeIndex(torch.tensor([7, 3, 7, 9]))
    local, found = index.lookup(torch.tensor([3, 7, 9, 4]))
    assert found.tolist() == [True, True, True, False]
    assert local[:3].tolist() == [1, 0, 3]
    local, new = index.add(torch.empty(0, dtype=torch.long))
    assert local.numel() == 0 and new.numel() == 0
    empty = NodeIndex(torch.empty(0, dtype=torch.long))
    local, new = empty.add(torch.tensor([5, 5, 2]))
    assert local.tolist() == [0, 0, 1] and new.tolist() == [5, 2]


def test_segment_gather_index():
    idx = segment_gather_index(torch.tensor([10, 0, 5]), torch.tensor([2, 0, 3]))
    assert idx.tolist() == [10, 11, 5, 6, 7]
    assert segment_gather_index(torch.tensor([3]), torch.tensor([0])).numel() == 0


def test_reassemble_restores_frontier_order():
    # Frontier of 5 seeds; server 0 owns positions 3, 0; server 1 owns 4, 1, 2.
    positions = [torch.tensor([3, 0]), torch.tensor([4, 1, 2])]
    counts = [torch.tensor([2, 1]), torch.tensor([0, 3, 1])]
    nbrs = [torch.tensor([30, 31, 0]), torch.tensor([10, 11, 12, 20])]
    eids = [torch.tensor([300, 301, 0]), torch.tensor([100, 110, 120, 200])]
    out_counts, (out_nbrs, out_eids) = reassemble(
        5, positions, counts, [(nbrs[0], eids[0]), (nbrs[1], eids[1])])
    assert out_counts.tolist() == [1, 3, 1, 2, 0]
    assert out_nbrs.tolist() == [0, 10, 11, 12, 20, 30, 31]
    assert out_eids.tolist() == [0, 100, 110, 120, 200, 300, 301]


def test_reassemble_single_server_in_order_is_passthrough():
    counts, (nbrs,) = reassemble(
        2, [torch.tensor([0, 1])], [torch.tensor([1, 2])], [(torch.tensor([5, 6, 7]),)])
    assert counts.tolist() == [1, 2] and nbrs.tolist() == [5, 6, 7]
    counts, (nbrs,) = reassemble(
        2, [torch.tensor([1, 0])], [torch.tensor([1, 2])], [(torch.tensor([5, 6, 7]),)])
    assert counts.tolist() == [2, 1] and nbrs.tolist() == [6, 7, 5]
