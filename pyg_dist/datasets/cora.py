"""Cora (2,708 papers, 1,433 word features, 7 classes) from the
``graphdatascience`` wheel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from pyg_dist.datasets.resources import node_positions, planetoid_masks, resource_dir
from pyg_dist.errors import DatasetResolveError

CORA_NUM_NODES = 2708
CORA_NUM_FEATURES = 1433
CORA_NUM_CLASSES = 7


def _cora_dir() -> Path:
    return resource_dir("cora", "cora_nodes.parquet.gzip")


def cora(*, seed: int = 0) -> Data:
    """Loads Cora (2,708 papers, 10,556 directed citation edges, 1,433 binary
    features, 7 classes) from the parquet files in the ``graphdatascience`` wheel.

    Node ``i`` is the ``i``-th row of ``cora_nodes.parquet.gzip``; the original
    paper ids of the relationship file are mapped to these positions. Edges are
    made undirected (both directions, coalesced) as in PyG's ``Planetoid``.

    Args:
        seed: Seed of the Planetoid-style masks (20 train nodes per class,
            500 validation, 1,000 test).

    Returns:
        A :class:`~torch_geometric.data.Data` with ``x`` (float32), ``y``
        (int64), ``edge_index`` and boolean ``train_mask``/``val_mask``/``test_mask``.
    """
    import pyarrow.parquet as pq
    from torch_geometric.utils import to_undirected

    root = _cora_dir()
    nodes = pq.read_table(root / "cora_nodes.parquet.gzip",
                          columns=["nodeId", "subject", "features"])
    rels = pq.read_table(root / "cora_rels.parquet.gzip",
                         columns=["sourceNodeId", "targetNodeId"])
    paper_ids = nodes.column("nodeId").to_numpy()
    num_nodes = len(paper_ids)
    flat = nodes.column("features").combine_chunks().flatten().to_numpy()
    if flat.size % num_nodes != 0:
        raise DatasetResolveError("Cora's feature lists have unequal lengths; "
                                  "the graphdatascience wheel is damaged")
    x = torch.from_numpy(flat.reshape(num_nodes, -1).astype(np.float32))
    y = torch.from_numpy(nodes.column("subject").to_numpy().astype(np.int64))

    # Original paper ids to node-file positions.
    order = np.argsort(paper_ids, kind="stable")
    ends = [node_positions(paper_ids, rels.column(c).to_numpy(), "Cora's cora_rels", order)
            for c in ("sourceNodeId", "targetNodeId")]
    edge_index = torch.from_numpy(np.stack(ends).astype(np.int64))
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    data = Data(x=x, y=y, edge_index=edge_index)
    return planetoid_masks(data, seed=seed)
