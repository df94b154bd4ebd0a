"""The pure relabel logic of the distributed sampler, on plain tensors."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.hops.relabel import DenseNodeIndex, NodeIndex, node_index


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


IMPLEMENTATIONS = [NodeIndex, lambda seeds: DenseNodeIndex(seeds, 200)]


@pytest.mark.parametrize("make", IMPLEMENTATIONS, ids=["sorted", "dense"])
def test_node_index_matches_dictionary_relabel_over_hops(make):
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randint(0, 50, (20,), generator=gen)  # with repeats
    index = make(seeds)
    nodes = seeds.tolist()
    for _ in range(3):
        keys = torch.randint(0, 200, (300,), generator=gen)
        local, new = index.add(keys)
        ref_local, ref_new = _reference_relabel(nodes, keys.tolist())
        assert local.tolist() == ref_local
        assert new.tolist() == ref_new
        nodes += ref_new
        assert index.num_nodes == len(nodes)


@pytest.mark.parametrize("make", IMPLEMENTATIONS, ids=["sorted", "dense"])
def test_node_index_seeds_keep_their_positions_and_empty_input(make):
    index = make(torch.tensor([7, 3, 7, 9]))
    local, found = index.lookup(torch.tensor([3, 7, 9, 4]))
    assert found.tolist() == [True, True, True, False]
    assert local[:3].tolist() == [1, 0, 3]
    local, new = index.add(torch.empty(0, dtype=torch.long))
    assert local.numel() == 0 and new.numel() == 0
    empty = make(torch.empty(0, dtype=torch.long))
    local, new = empty.add(torch.tensor([5, 5, 2]))
    assert local.tolist() == [0, 0, 1] and new.tolist() == [5, 2]


def test_node_index_picks_dense_for_small_key_spaces():
    seeds = torch.tensor([1, 2])
    assert isinstance(node_index(seeds, 1000), DenseNodeIndex)
    assert isinstance(node_index(seeds, 1 << 40), NodeIndex)
    assert isinstance(node_index(seeds), NodeIndex)
