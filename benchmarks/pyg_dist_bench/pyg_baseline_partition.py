"""Partition a graph with PyG's own ``torch_geometric.distributed.Partitioner``.

PyG's ``Partitioner`` runs METIS through ``ClusterData._metis``, which needs
either torch-sparse built with METIS (``torch.ops.torch_sparse.partition``) or
pyg-lib. torch-sparse built from source without ``WITH_METIS=1`` has no METIS
and pyg-lib has no wheel on the index this project can reach; in that case
(and only then: ``ClusterData`` raises ``ImportError``) the METIS call is
answered by ``pymetis`` (the same METIS library) on the symmetrised graph, for
the duration of the call. Everything else (the permutation, the per-part CSC
files, ``node_map.pt``, ``META.json``) is PyG's code, unchanged.

Besides PyG's files, it writes the two inputs PyG's example keeps beside the
partitions, in safetensors instead of ``torch.save``: the label vector and the
training seeds of each partition.
"""

from __future__ import annotations

import contextlib
import logging
import os.path as osp
import time
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch import Tensor

logger = logging.getLogger(__name__)


def _pymetis_membership(edge_index: Tensor, num_nodes: int, num_parts: int) -> Tensor:
    """METIS k-way part of every node via pymetis (symmetric, no self-loops)."""
    import pymetis
    from torch_geometric.utils import remove_self_loops, to_undirected

    ei, _ = remove_self_loops(edge_index)
    ei = to_undirected(ei, num_nodes=num_nodes)
    order = torch.argsort(ei[0] * num_nodes + ei[1])
    row, col = ei[0][order], ei[1][order]
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(row, minlength=num_nodes), 0)
    adjacency = pymetis.CSRAdjacency(adj_starts=ptr.numpy(), adjacent=col.numpy())
    membership = pymetis.part_graph(num_parts, adjacency).vertex_part
    return torch.as_tensor(membership, dtype=torch.long)


@contextlib.contextmanager
def _metis_fallback(record: dict[str, Any]) -> Iterator[None]:
    """While active, answer ``ClusterData._metis`` with pymetis if PyG finds no METIS."""
    from torch_geometric.loader.cluster import ClusterData

    original = ClusterData._metis

    def _metis(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        try:
            out = original(self, edge_index, num_nodes)
            record["metis"] = "PyG ClusterData (torch-sparse or pyg-lib METIS)"
            return out
        except ImportError as exc:
            record["metis"] = "pymetis (PyG found neither torch-sparse METIS nor pyg-lib)"
            record["metis_patch"] = (
                f"ClusterData._metis raised ImportError ({exc}); METIS membership computed "
                "with pymetis on the symmetrised graph during Partitioner.generate_partition()")
            return _pymetis_membership(edge_index, num_nodes, self.num_parts).to(
                edge_index.device)

    ClusterData._metis = _metis
    try:
        yield
    finally:
        ClusterData._metis = original


def train_seeds(data) -> Tensor:
    """The training seed nodes: ``train_mask`` if the graph has one, else every node."""
    mask: Optional[Tensor] = getattr(data, "train_mask", None)
    if mask is not None:
        return mask.nonzero().view(-1)
    return torch.arange(data.num_nodes)


def partition_with_pyg(data, num_parts: int, root: str,
                       input_nodes: Optional[Tensor] = None) -> dict[str, Any]:
    """Partition ``data`` into ``root`` with PyG's ``Partitioner``.

    Args:
        data: A homogeneous ``torch_geometric.data.Data`` with ``x``.
        num_parts: Number of partitions (at least 2, as PyG requires).
        root: Directory for PyG's partition files and the two extra files.
        input_nodes: Seed nodes (default: :func:`train_seeds`); each partition
            trains on the seeds it owns, as in PyG's example.

    Returns:
        ``partition_root``, ``labels_path``, ``seeds_path``, ``seeds_per_part``,
        ``partition_s``, ``metis`` (which METIS answered) and, when the
        fallback was used, ``metis_patch``.
    """
    from safetensors.torch import save_file
    from torch_geometric.distributed import Partitioner
    from torch_geometric.io import fs

    info: dict[str, Any] = {}
    part_root = osp.join(root, "pyg-partitions")
    t0 = time.perf_counter()
    with _metis_fallback(info):
        Partitioner(data, num_parts, part_root).generate_partition()
    info["partition_s"] = time.perf_counter() - t0

    node_map = fs.torch_load(osp.join(part_root, "node_map.pt"))
    seeds = train_seeds(data) if input_nodes is None else input_nodes.to(torch.long)
    owner = node_map[seeds]
    per_part = {f"part_{p}": seeds[owner == p].contiguous() for p in range(num_parts)}
    y = data.y if getattr(data, "y", None) is not None else torch.zeros(data.num_nodes)
    info.update(
        partition_root=part_root,
        labels_path=osp.join(root, "labels.safetensors"),
        seeds_path=osp.join(root, "train_seeds.safetensors"),
        seeds_per_part=[int(v.numel()) for v in per_part.values()],
    )
    save_file({"y": y.contiguous()}, info["labels_path"])
    save_file(per_part, info["seeds_path"])
    return info
