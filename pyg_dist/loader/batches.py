"""Joining a sample with its node and edge attributes into a PyG batch.

PyG's ``filter_custom_store`` / ``filter_custom_hetero_store`` do this for
any ``(FeatureStore, GraphStore)`` pair, but they fetch node features only
(edge attributes never reach a batch), set ``num_nodes`` only for node
types that have features, and leave out the ids, hop counts and seed trees
that ``NodeLoader.filter_fn`` adds for in-memory graphs. These are the same
joins with PyG's full batch schema:

* homogeneous (:func:`data_batch`): ``edge_index``, ``n_id``, ``e_id``,
  every node attribute, every edge attribute (``edge_attr``, ``edge_weight``,
  ... by ``e_id``), ``batch`` when sampling was disjoint,
  ``num_sampled_nodes`` / ``num_sampled_edges``;
* heterogeneous (:func:`hetero_batch`): the same per node type and per
  edge type.

Node and edge attributes go in one ``multi_get_tensor``, so a batch's
features cost one round trip to the servers. A feature store without
``get_all_edge_tensor_attrs`` (PyG's own, say) gives node features only.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, FeatureStore, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist.store.remote_feature_store import RemoteFeatureStore, outputs_pinned


def _edge_attrs(feature_store: FeatureStore) -> list[Any]:
    listed = getattr(feature_store, "get_all_edge_tensor_attrs", None)
    return listed() if listed is not None else []


def fetch_attrs(feature_store: FeatureStore, attrs: list[Any]) -> list[Any]:
    """``feature_store.multi_get_tensor(attrs)`` for attributes this module
    built (every field set, the index a batch's ids).

    PyG's ``multi_get_tensor`` casts every attribute and checks that it is
    fully specified; the check compares the index tensor with a marker,
    which torch answers through a failed conversion: ~12 us an attribute, a
    batch's fixed cost. A :class:`RemoteFeatureStore` whose
    ``multi_get_tensor`` is PyG's is asked through ``_multi_get_tensor``
    directly (it checks every attribute's type and name itself); any other
    store through its public method.
    """
    if isinstance(feature_store, RemoteFeatureStore) and \
            type(feature_store).multi_get_tensor is FeatureStore.multi_get_tensor:
        return feature_store._multi_get_tensor(attrs)
    return feature_store.multi_get_tensor(attrs)


def edge_index_of(row: Tensor, col: Tensor) -> Tensor:
    """``torch.stack([row, col])``; in page-locked memory for a batch bound
    for a GPU (inside :func:`~pyg_dist.store.remote_feature_store.pinned_outputs`),
    so that the copy to the device reads it as it is: the pinning pass
    before that copy would otherwise copy the whole edge index once more."""
    if not outputs_pinned() or row.device.type != "cpu":
        return torch.stack([row, col], dim=0)
    out = torch.empty((2, row.numel()), dtype=torch.promote_types(row.dtype, col.dtype),
                      pin_memory=True)
    return torch.stack([row, col], dim=0, out=out)


def data_batch(feature_store: FeatureStore, out: SamplerOutput,
               custom_cls: Optional[type[Data]] = None,
               edge_permutation: Optional[Tensor] = None) -> Data:
    """Builds the ``Data`` batch of one homogeneous sample.

    Args:
        feature_store: Serves node attributes (``group_name`` ``None``) and,
            if it lists them, edge attributes (``group_name`` ``(None, None)``).
        out: The sample (global node ids, local ``row`` / ``col``, edge ids).
        custom_cls: A ``Data`` subclass to build (PyG's ``custom_cls``).
        edge_permutation: Maps ``out.edge`` to global edge ids (a sampler's
            ``edge_permutation``; ``None``: they are global already).

    Returns:
        The batch, without the loader's input fields (``input_id``, ...).
    """
    data = custom_cls() if custom_cls is not None else Data()
    data.edge_index = edge_index_of(out.row, out.col)
    data.num_nodes = out.node.numel()
    edge = None
    if out.edge is not None:
        edge = out.edge.to(torch.long)
        edge = edge_permutation[edge] if edge_permutation is not None else edge
    attrs = []
    for attr in feature_store.get_all_tensor_attrs():
        attr.index = out.node
        attrs.append(attr)
    if edge is not None:
        for attr in _edge_attrs(feature_store):
            attr.index = edge
            attrs.append(attr)
    if attrs:
        for attr, tensor in zip(attrs, fetch_attrs(feature_store, attrs)):
            data[attr.attr_name] = tensor
    data.n_id = out.node
    if edge is not None:
        data.e_id = edge
    data.batch = out.batch
    data.num_sampled_nodes = out.num_sampled_nodes
    data.num_sampled_edges = out.num_sampled_edges
    if out.orig_row is not None and out.orig_col is not None:
        data._orig_edge_index = torch.stack([out.orig_row, out.orig_col], dim=0)
    return data


def hetero_batch(feature_store: FeatureStore, out: HeteroSamplerOutput,
                 custom_cls: Optional[type[HeteroData]] = None) -> HeteroData:
    """Builds the ``HeteroData`` batch of one heterogeneous sample.

    Args:
        feature_store: Serves node attributes (``group_name`` the node type)
            and, if it lists them, edge attributes (``group_name`` the edge
            type).
        out: The sample: global node ids per node type, local ``row`` /
            ``col`` and global edge ids per edge type.
        custom_cls: A ``HeteroData`` subclass to build (PyG's
            ``custom_cls``).

    Returns:
        The batch, without the loader's input fields (``input_id``, ...).
    """
    data = custom_cls() if custom_cls is not None else HeteroData()
    for node_type, node in out.node.items():
        data[node_type].num_nodes = node.numel()
        data[node_type].n_id = node
    edges = {t: e.to(torch.long) for t, e in (out.edge or {}).items() if e is not None}
    attrs = []
    for attr in feature_store.get_all_tensor_attrs():
        if attr.group_name in out.node:
            # One index object per type: one request per server and type.
            attr.index = out.node[attr.group_name]
            attrs.append(attr)
    for attr in _edge_attrs(feature_store):
        if attr.group_name in edges:
            attr.index = edges[attr.group_name]
            attrs.append(attr)
    if attrs:
        for attr, tensor in zip(attrs, fetch_attrs(feature_store, attrs)):
            data[attr.group_name][attr.attr_name] = tensor
    for edge_type, row in out.row.items():
        data[edge_type].edge_index = edge_index_of(row, out.col[edge_type])
        if edge_type in edges:
            data[edge_type].e_id = edges[edge_type]
    if out.batch is not None:
        data.set_value_dict("batch", out.batch)
    if out.num_sampled_nodes is not None:
        data.set_value_dict("num_sampled_nodes", out.num_sampled_nodes)
    if out.num_sampled_edges is not None:
        data.set_value_dict("num_sampled_edges", out.num_sampled_edges)
    return data
