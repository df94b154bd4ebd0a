"""Checks shared by the reliability tests."""

from __future__ import annotations

import torch

LIMIT = 1 << 20  # --max-message-bytes of the shared part-0 server (conftest)


def assert_batch_matches_graph(batch, data, edge_keys) -> None:
    """A batch's features, labels and edges are those of the original graph."""
    n_id = batch.n_id
    assert torch.equal(batch.x, data.x[n_id])
    assert torch.equal(batch.y, data.y[n_id])
    src, dst = n_id[batch.edge_index[0]], n_id[batch.edge_index[1]]
    keys = src * data.num_nodes + dst
    pos = torch.searchsorted(edge_keys, keys).clamp(max=edge_keys.numel() - 1)
    assert bool((edge_keys[pos] == keys).all()), "a sampled edge is not in the graph"
    # The edge ids name exactly these edges of the input edge_index.
    assert torch.equal(data.edge_index[0, batch.e_id], src)
    assert torch.equal(data.edge_index[1, batch.e_id], dst)
