"""In-server stores: PyG's :class:`FeatureStore` / :class:`GraphStore` over one part.

* :class:`PartitionFeatureStore`: a dict of tensors keyed by
  ``(group_name, attr_name)``; ``group_name`` is the node type (``None`` for a
  homogeneous graph) and ``index`` is the *local row*, the position of a node
  in the part's sorted ``node_ids``.
* :class:`PartitionGraphStore`: per edge type, the CSC of the owned nodes'
  incoming edges with **global** source ids (``row``) and a pointer over
  local destinations (``colptr``), plus the global edge ids and owned node ids.

:func:`local_rows` turns owned global ids into local rows (one binary search).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.typing import EdgeTensorType, FeatureTensorType

from pyg_dist.errors import StoreError
from pyg_dist.partitioning.file_names import edge_ends
from pyg_dist.partitioning.reader import PartData

Key = tuple[Optional[str], str]


def local_rows(node_ids: Tensor, ids: Tensor) -> Tensor:
    """Local rows of owned global ``ids`` in a part whose sorted owned ids are
    ``node_ids``.

    Raises:
        StoreError: if an id is not owned by the part.
    """
    ids = ids.to(torch.int64).view(-1)
    if node_ids.numel() == 0:
        if ids.numel():
            raise StoreError("this part owns no nodes; the ids belong to other parts")
        return ids
    rows = torch.searchsorted(node_ids, ids).clamp_(max=node_ids.numel() - 1)
    bad = node_ids[rows] != ids
    if bool(bad.any()):
        raise StoreError(f"{int(bad.sum())} of {ids.numel()} ids are not owned by this part "
                         f"(first: {int(ids[bad][0])}); route them with the partition book")
    return rows


class PartitionFeatureStore(FeatureStore):
    """A dict-backed PyG feature store holding one part's node features.

    Args:
        tensors: Initial ``{(group_name, attr_name): tensor}``; rows are local rows.
    """

    reads_may_block = False
    """Whether a read may wait on a disk (tensors mapped from files): the
    partition server then serves every read on a worker thread, never on its
    I/O thread (docs/plugins.md, "A store")."""

    def __init__(self, tensors: Optional[dict[Key, Tensor]] = None) -> None:
        super().__init__()
        self._tensors: dict[Key, Tensor] = dict(tensors or {})

    @classmethod
    def from_part(cls, part: PartData) -> PartitionFeatureStore:
        """Builds a store from a loaded part (every node type's features)."""
        return cls({(node_type, name): value
                    for node_type, nodes in part.nodes.items()
                    for name, value in nodes.features.items()})

    @staticmethod
    def _key(attr: TensorAttr) -> Key:
        return (attr.group_name, attr.attr_name)

    def _lookup(self, attr: TensorAttr) -> Tensor:
        tensor = self._tensors.get(self._key(attr))
        if tensor is None:
            raise StoreError(
                f"no feature {attr.attr_name!r} in group {attr.group_name!r}; this store "
                f"holds {sorted(self._tensors, key=str)}")
        return tensor

    def _put_tensor(self, tensor: FeatureTensorType, attr: TensorAttr) -> bool:
        if isinstance(tensor, np.ndarray):
            tensor = torch.from_numpy(tensor)
        index = attr.index
        if index is None or (isinstance(index, slice) and index == slice(None)):
            self._tensors[self._key(attr)] = tensor
            return True
        self._lookup(attr)[self._index(attr, index)] = tensor
        return True

    def _index(self, attr: TensorAttr, index: Any) -> Any:
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        if isinstance(index, Tensor) and index.dtype != torch.bool and index.numel():
            rows = self._lookup(attr).size(0)
            low, high = int(index.min()), int(index.max())
            if low < -rows or high >= rows:
                raise StoreError(
                    f"index of {attr.attr_name!r} out of range: [{low}, {high}] for {rows} "
                    f"local rows; pass local rows (see pyg_dist.store.local.local_rows)")
        return index

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        tensor = self._lookup(attr)
        index = attr.index
        if index is None or (isinstance(index, slice) and index == slice(None)):
            return tensor
        return tensor[self._index(attr, index)]

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return self._tensors.pop(self._key(attr), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        tensor = self._tensors.get(self._key(attr))
        return tuple(tensor.shape) if tensor is not None else None

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every ``(group_name, attr_name)`` held, with ``index`` unset."""
        return [TensorAttr(group, name) for group, name in self._tensors]


class PartitionGraphStore(GraphStore):
    """A PyG graph store over one part's CSC topology.

    Args:
        num_nodes: Global number of nodes per node type, used as the source
            dimension of each edge type's size (``{None: n}`` when homogeneous).
    """

    reads_may_block = False
    """Whether a read may wait on a disk: see
    :attr:`PartitionFeatureStore.reads_may_block`."""

    def __init__(self, num_nodes: Optional[dict[Optional[str], int]] = None) -> None:
        super().__init__()
        self._num_nodes = dict(num_nodes or {})
        self._csc: dict[Any, tuple[Tensor, Tensor, Tensor]] = {}
        self._node_ids: dict[Optional[str], Tensor] = {}

    @classmethod
    def from_part(cls, part: PartData,
                  num_nodes: Optional[dict[Optional[str], int]] = None) -> PartitionGraphStore:
        """Builds a store from a loaded part (every edge type's CSC, every
        node type's owned ids)."""
        store = cls(num_nodes)
        for node_type, nodes in part.nodes.items():
            store.put_node_ids(nodes.node_ids, node_type)
        for edge_type, edges in part.edges.items():
            store.put_csc(edges.indptr, edges.indices, edges.edge_ids, edge_type)
        return store

    def put_node_ids(self, node_ids: Tensor, node_type: Optional[str] = None) -> None:
        """Registers the sorted owned global ids of ``node_type``."""
        self._node_ids[node_type] = node_ids

    def put_csc(self, indptr: Tensor, indices: Tensor, edge_ids: Tensor,
                edge_type: Any = None) -> None:
        """Registers one edge type's CSC (global ``indices``, global ``edge_ids``)."""
        if indices.numel() != edge_ids.numel() or indptr.dim() != 1:
            raise StoreError("indices and edge_ids must align and indptr must be 1-D")
        self._csc[edge_type] = (indptr, indices, edge_ids)

    def _entry(self, edge_type: Any) -> tuple[Tensor, Tensor, Tensor]:
        entry = self._csc.get(edge_type)
        if entry is None:
            raise StoreError(f"no edge type {edge_type!r}; this store holds {list(self._csc)}")
        return entry

    def node_ids(self, node_type: Optional[str] = None) -> Tensor:
        """Sorted owned global ids of ``node_type`` (int64)."""
        ids = self._node_ids.get(node_type)
        if ids is None:
            raise StoreError(f"no node type {node_type!r}; this store holds "
                             f"{list(self._node_ids)}")
        return ids

    def get_edge_ids(self, edge_type: Any = None) -> Tensor:
        """Global edge id of every entry of the CSC ``row`` of ``edge_type``."""
        return self._entry(edge_type)[2]

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        if edge_attr.layout != EdgeLayout.CSC:
            raise StoreError("PartitionGraphStore holds CSC only: put (row, colptr) with "
                             "layout='csc'")
        row, colptr = edge_index
        self.put_csc(colptr, row, torch.arange(row.numel()), edge_attr.edge_type)
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        indptr, indices, _ = self._entry(edge_attr.edge_type)
        if edge_attr.layout == EdgeLayout.CSC:
            return indices, indptr
        if edge_attr.layout == EdgeLayout.COO:
            # COO in global ids on both sides: local destinations are mapped back.
            owned = self.node_ids(edge_ends(edge_attr.edge_type)[1])
            counts = indptr[1:] - indptr[:-1]
            return indices, torch.repeat_interleave(owned, counts)
        raise StoreError("PartitionGraphStore serves layout 'csc' (or 'coo'), not 'csr'")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return self._csc.pop(edge_attr.edge_type, None) is not None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        """One CSC :class:`EdgeAttr` per edge type, sized (global sources, owned
        destinations)."""
        attrs = []
        for edge_type, (indptr, _, _) in self._csc.items():
            num_src = self._num_nodes.get(edge_ends(edge_type)[0])
            size = (num_src, indptr.numel() - 1) if num_src is not None else None
            attrs.append(EdgeAttr(edge_type, EdgeLayout.CSC, True, size))
        return attrs
