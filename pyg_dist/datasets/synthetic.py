"""Synthetic graphs: PyG's ``FakeDataset`` and ``FakeHeteroDataset`` with
masks, and a power-law graph.
"""

from __future__ import annotations

import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets.resources import planetoid_masks, seeded


def fake(num_nodes: int = 1000, avg_degree: float = 10.0, num_channels: int = 16,
         num_classes: int = 5, *, is_undirected: bool = True, edge_dim: int = 0,
         seed: int = 0) -> Data:
    """A synthetic graph from PyG's :class:`~torch_geometric.datasets.FakeDataset`,
    with Planetoid-style masks.

    FakeDataset draws its node count uniformly in ``[3n/4, 5n/4]`` and its
    edges at random; everything runs in a forked RNG seeded with ``seed``, so
    the same arguments give the same graph.

    Args:
        num_nodes: Average number of nodes.
        avg_degree: Average number of edges drawn per node (before making the
            graph undirected, which about doubles it).
        num_channels: Feature dimension of ``x``.
        num_classes: Number of label classes of ``y``.
        is_undirected: Store both directions of every edge.
        edge_dim: Edge feature dimension (0: none, 1: ``edge_weight``,
            more: ``edge_attr``).
        seed: Seed of the graph and the masks.
    """
    from torch_geometric.datasets import FakeDataset

    data = seeded(seed, lambda: FakeDataset(
        num_graphs=1, avg_num_nodes=num_nodes, avg_degree=avg_degree,
        num_channels=num_channels, edge_dim=edge_dim, num_classes=num_classes,
        is_undirected=is_undirected)[0])
    return _with_masks(data, num_classes, seed)


def fake_hetero(num_nodes: int = 1000, avg_degree: float = 10.0, num_channels: int = 16,
                num_classes: int = 5, *, num_node_types: int = 3, num_edge_types: int = 6,
                seed: int = 0) -> HeteroData:
    """A synthetic heterogeneous graph from PyG's
    :class:`~torch_geometric.datasets.FakeHeteroDataset`, with Planetoid-style
    masks on the labelled node type ``v0``.

    Node types are ``v0, v1, ...``, edge types ``(vI, eK, vJ)``; every node
    type has features ``x`` (of a width drawn around ``num_channels``) and
    ``v0`` labels ``y``. Everything runs in a forked RNG seeded with ``seed``.

    Args:
        num_nodes: Average number of nodes per node type.
        avg_degree: Average number of edges per source node and edge type.
        num_channels: Average feature width.
        num_classes: Number of label classes of ``v0``.
        num_node_types: Number of node types.
        num_edge_types: Number of edge types.
        seed: Seed of the graph and the masks.
    """
    from torch_geometric.datasets import FakeHeteroDataset

    data = seeded(seed, lambda: FakeHeteroDataset(
        num_graphs=1, num_node_types=num_node_types, num_edge_types=num_edge_types,
        avg_num_nodes=num_nodes, avg_num_channels=num_channels, avg_degree=avg_degree,
        num_classes=num_classes, task="node")[0])
    labelled = data["v0"]
    masks = _with_masks(Data(y=labelled.y, num_nodes=labelled.num_nodes), num_classes, seed)
    for name in ("train_mask", "val_mask", "test_mask"):
        labelled[name] = masks[name]
    return data


def _with_masks(data: Data, num_classes: int, seed: int) -> Data:
    """Planetoid-style masks: a tenth of the nodes' worth of training nodes
    spread over the classes, a tenth for validation, a fifth for test."""
    n = data.num_nodes
    return planetoid_masks(data, num_train_per_class=max(1, n // (10 * num_classes)),
                           num_val=n // 10, num_test=n // 5, seed=seed)


def power_law(num_nodes: int = 100_000, num_edges: int = 300_000, num_channels: int = 64,
              num_classes: int = 10, *, exponent: float = 0.8, seed: int = 0) -> Data:
    """A synthetic undirected graph with power-law degrees (Chung-Lu).

    Real graphs are skewed: a few hubs sit in most neighbourhoods, which is
    what a feature cache or a partitioner is judged on, and what
    :func:`fake` (uniform random edges) lacks. Each edge's endpoints are drawn
    with probability proportional to ``rank ** -exponent``; self-loops are
    dropped and both directions stored.

    Args:
        num_nodes: Nodes.
        num_edges: Edges drawn before dropping self-loops and duplicates and
            adding the reverse direction.
        num_channels: Feature dimension of ``x`` (standard normal).
        num_classes: Label classes of ``y`` (uniform).
        exponent: Skew: 0 is uniform, larger is more skewed.
        seed: Seed of everything.
    """
    from torch_geometric.utils import to_undirected

    generator = torch.Generator().manual_seed(seed)
    weight = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow(-exponent)
    ends = torch.multinomial(weight, 2 * num_edges, replacement=True, generator=generator)
    # Shuffled, so that the hubs are not the lowest ids (partitioners see ids).
    relabel = torch.randperm(num_nodes, generator=generator)
    ends = relabel[ends[torch.randperm(ends.numel(), generator=generator)]].view(2, -1)
    edge_index = to_undirected(ends[:, ends[0] != ends[1]], num_nodes=num_nodes)
    return Data(x=torch.randn(num_nodes, num_channels, generator=generator),
                y=torch.randint(0, num_classes, (num_nodes,), generator=generator),
                edge_index=edge_index, num_nodes=num_nodes)
