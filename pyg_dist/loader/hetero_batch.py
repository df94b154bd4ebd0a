"""Joining a heterogeneous sample with its features into a ``HeteroData`` batch.

PyG's ``filter_custom_hetero_store`` does this for any ``(FeatureStore,
GraphStore)`` pair, but it sets ``num_nodes`` only for node types that have
features and leaves out the ids, hop counts and seed trees that
``NodeLoader.filter_fn`` adds for in-memory graphs. This is the same join
with PyG's full batch schema: per node type ``n_id``, ``num_nodes``, its
features (every node type's rows in one ``multi_get_tensor``, so one round
trip to the servers), ``batch`` when sampling was disjoint and
``num_sampled_nodes``; per edge type ``edge_index``, ``e_id`` and
``num_sampled_edges``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch_geometric.data import FeatureStore, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput


def filter_hetero_store(feature_store: FeatureStore, graph_store: Any,
                        out: HeteroSamplerOutput,
                        custom_cls: Optional[type[HeteroData]] = None) -> HeteroData:
    """Builds the ``HeteroData`` batch of one heterogeneous sample.

    Args:
        feature_store: Serves node features, ``group_name`` the node type.
        graph_store: The graph store the sample came from (its edge types).
        out: The sample: global node ids per node type, local ``row`` /
            ``col`` and global edge ids per edge type.
        custom_cls: A ``HeteroData`` subclass to build (PyG's
            ``custom_cls``).

    Returns:
        The batch, without the input type's ``input_id`` / ``batch_size``
        (the loader adds those).
    """
    data = custom_cls() if custom_cls is not None else HeteroData()
    for node_type, node in out.node.items():
        data[node_type].num_nodes = node.numel()
        data[node_type].n_id = node
    attrs = []
    for attr in feature_store.get_all_tensor_attrs():
        if attr.group_name in out.node:
            # One index object per node type: one request per server and type.
            attr.index = out.node[attr.group_name]
            attrs.append(attr)
    if attrs:
        for attr, tensor in zip(attrs, feature_store.multi_get_tensor(attrs)):
            data[attr.group_name][attr.attr_name] = tensor
    for edge_type, row in out.row.items():
        data[edge_type].edge_index = torch.stack([row, out.col[edge_type]], dim=0)
        edge = (out.edge or {}).get(edge_type)
        if edge is not None:
            data[edge_type].e_id = edge.to(torch.long)
    if out.batch is not None:
        data.set_value_dict("batch", out.batch)
    if out.num_sampled_nodes is not None:
        data.set_value_dict("num_sampled_nodes", out.num_sampled_nodes)
    if out.num_sampled_edges is not None:
        data.set_value_dict("num_sampled_edges", out.num_sampled_edges)
    return data
