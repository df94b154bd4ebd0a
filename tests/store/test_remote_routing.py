"""Putting per-server answers back into the caller's order, on plain tensors."""

from __future__ import annotations

import torch

from pyg_dist.routing.id_router import reassemble


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
