"""A graph held in memory as a source of the chunked writer.

``partition()`` validates a ``Data`` / ``HeteroData`` into
:class:`~pyg_dist.partitioning.inputs.GraphParts`; :func:`graph_source` lays
it out as the :class:`~pyg_dist.partitioning.file_source.FileGraph` that
``pyg-dist partition --from DIR`` reads, so that one set of passes
(:mod:`~pyg_dist.partitioning.file_parts`) writes every dataset, from memory,
from files on one host, or across ranks. Attributes are read a window of rows
at a time (:class:`TensorRows`, as :class:`~pyg_dist.partitioning.file_arrays.RowArray`
reads a ``.npy``), edges a chunk of ``edge_index`` at a time
(:class:`TensorEdges`, as :class:`~pyg_dist.partitioning.file_arrays.EdgeSet`
reads parquet files): a window is a view where the tensor is a contiguous
CPU one, a copy of the window only where it is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.file_source import FileGraph, NodeSet
from pyg_dist.partitioning.format import SAFETENSORS_DTYPES
from pyg_dist.partitioning.inputs import GraphParts
from pyg_dist.partitioning.safetensors_stream import BFLOAT16, HEADER_DTYPES

_NUMPY_OF = {name: dtype for dtype, name in HEADER_DTYPES.items()}


@dataclass(frozen=True)
class TensorRows:
    """One node or edge attribute held as a tensor, read by row windows.

    Args:
        name: The attribute.
        tensor: Its values, one row per node (edge); any device and layout.
    """

    name: str
    tensor: Tensor

    def __post_init__(self) -> None:
        if self.tensor.dtype not in SAFETENSORS_DTYPES:
            raise InvalidPartitionArgumentError(
                f"attribute {self.name!r} is of dtype {self.tensor.dtype}, which the "
                f"partition format does not store; convert it to one of "
                f"{sorted(str(d).removeprefix('torch.') for d in SAFETENSORS_DTYPES)}")

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of its rows (:data:`~pyg_dist.partitioning.safetensors_stream.BFLOAT16`
        for bfloat16)."""
        return _NUMPY_OF[SAFETENSORS_DTYPES[self.tensor.dtype]]

    @property
    def shape(self) -> tuple[int, ...]:
        """Its shape; ``shape[0]`` is the node (edge) count."""
        return tuple(self.tensor.shape)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a numpy array (a view where it can be)."""
        rows = self.tensor[start:stop].detach().cpu().contiguous()
        if rows.dtype == torch.bfloat16:
            return rows.view(torch.int16).numpy().view(BFLOAT16)
        return rows.numpy()


@dataclass
class TensorEdges:
    """The edges of one edge type held as an ``edge_index``, read in chunks.

    Args:
        edge_index: ``[2, E]`` integer edges, checked by
            :func:`~pyg_dist.partitioning.inputs.check_edge_index`.
        arrays: The edge attributes by name.
    """

    edge_index: Tensor
    arrays: dict[str, TensorRows] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return int(self.edge_index.size(1))

    @property
    def attribute_row_bytes(self) -> int:
        """Bytes of one edge's attributes."""
        return sum(a.row_bytes for a in self.arrays.values())

    def chunks(self, chunk_edges: int, files: Optional[range] = None
               ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first edge id, src, dst)`` chunks of at most ``chunk_edges``
        edges (int64), in edge id order (``files``: unused, the edges are one
        piece)."""
        step = max(1, chunk_edges)
        for first in range(0, self.num_edges, step):
            ends = self.edge_index[:, first:first + step].to(torch.int64).numpy()
            yield first, ends[0], ends[1]


def graph_source(graph: GraphParts) -> FileGraph:
    """The validated graph as the chunked writer's input, keyed by type as
    it is (``None`` for a homogeneous graph's one node and edge type).

    Raises:
        InvalidPartitionArgumentError: if an attribute's dtype is not one the
            partition format stores.
    """
    nodes = {t: NodeSet(count, {name: TensorRows(name, value)
                                for name, value in graph.node_features[t].items()})
             for t, count in graph.num_nodes.items()}
    edges = {et: TensorEdges(ei, {name: TensorRows(name, value)
                                  for name, value in graph.edge_features[et].items()})
             for et, ei in graph.edge_index.items()}
    return FileGraph(None, nodes, edges)
