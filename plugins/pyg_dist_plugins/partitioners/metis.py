"""The ``metis`` partitioner: METIS (through pymetis) on the undirected graph.

METIS minimises the edge cut under balance constraints. Options mirror DGL's
``partition_graph``: ``balance_train`` adds per-part balance of training
nodes (DGL's ``balance_ntypes=train_mask``: one vertex-weight constraint for
training nodes and one for the rest), ``balance_edges`` adds a constraint on
each part's total degree so parts also carry similar numbers of edges.
Several constraints make METIS's multi-constraint mode balance all at once
(through METIS's C API: see :mod:`.metis_capi` for why not pymetis).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import PartitionInput
from pyg_dist_plugins.partitioners.metis_capi import part_graph_multi

logger = logging.getLogger(__name__)


class MetisPartitioner:
    """Partitions with METIS's k-way (or recursive bisection) algorithm.

    Args:
        balance_train: Balance training nodes (``train_mask``) across parts.
        balance_edges: Balance the sum of node degrees across parts.
        seed: METIS's random seed; the same seed gives the same parts.
        ufactor: Allowed imbalance in 1/1000 (METIS ``-ufactor``; ``None``:
            METIS's default of 30, i.e. 3%).
        recursive: Use recursive bisection (``None``: pymetis's default,
            recursive for up to 8 parts).
        max_degree: Thin the graph METIS sees (never the graph written):
            keep the undirected edge ``{u, v}`` with probability
            ``min(1, max_degree / min(deg u, deg v))``. METIS's memory and time
            grow with the edges of its coarsened graphs; on large, dense graphs
            this trades some edge cut for a fraction of both. ``None`` (the
            default) gives METIS every edge.
    """

    def __init__(self, balance_train: bool = False, balance_edges: bool = False,
                 seed: int = 0, ufactor: Optional[int] = None,
                 recursive: Optional[bool] = None, max_degree: Optional[int] = None) -> None:
        for name, value in (("balance_train", balance_train), ("balance_edges", balance_edges)):
            if not isinstance(value, bool):
                raise InvalidPartitionArgumentError(f"metis: {name} must be true or false, "
                                                    f"got {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidPartitionArgumentError(f"metis: seed must be an int, got {seed!r}")
        if ufactor is not None and (isinstance(ufactor, bool) or not isinstance(ufactor, int)
                                    or ufactor < 1):
            raise InvalidPartitionArgumentError(
                f"metis: ufactor must be a positive int (1/1000 imbalance), got {ufactor!r}")
        if recursive is not None and not isinstance(recursive, bool):
            raise InvalidPartitionArgumentError(f"metis: recursive must be a bool, got "
                                                f"{recursive!r}")
        if max_degree is not None and (isinstance(max_degree, bool)
                                       or not isinstance(max_degree, int) or max_degree < 1):
            raise InvalidPartitionArgumentError(
                f"metis: max_degree must be a positive int or null, got {max_degree!r}")
        self.max_degree = max_degree
        self.balance_train = balance_train
        self.balance_edges = balance_edges
        self.seed = seed
        self.ufactor = ufactor
        self.recursive = recursive

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"balance_train": self.balance_train, "balance_edges": self.balance_edges,
                "seed": self.seed, "ufactor": self.ufactor, "recursive": self.recursive,
                "max_degree": self.max_degree}

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id per node, computed by METIS."""
        import pymetis

        if num_parts == 1:
            return torch.zeros(graph.num_nodes, dtype=torch.int64)
        vweights, ncon = self._vertex_weights(graph)
        xadj, adjncy = graph.symmetric_csr(max_degree=self.max_degree, seed=self.seed)
        logger.info("metis: %d nodes, %d adjacency entries, %d constraint(s)",
                    graph.num_nodes, adjncy.shape[0], ncon)
        recursive = self.recursive if self.recursive is not None else num_parts <= 8
        if ncon > 1:
            parts = part_graph_multi(num_parts, xadj, adjncy, vweights, ncon, seed=self.seed,
                                     ufactor=self.ufactor, recursive=recursive)
            return torch.from_numpy(parts)
        options = pymetis.Options()
        options.seed = self.seed
        if self.ufactor is not None:
            options.ufactor = self.ufactor
        result = pymetis.part_graph(
            num_parts, pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy),
            vweights=vweights, options=options, recursive=recursive)
        del xadj, adjncy
        parts = np.frombuffer(result.vertex_part, dtype=np.int64)
        return torch.from_numpy(parts.copy())

    def _vertex_weights(self, graph: PartitionInput) -> tuple[Optional[np.ndarray], int]:
        """Interleaved vertex weights ``[num_nodes * ncon]`` (``None`` when every
        node weighs 1) and the number of constraints ``ncon``."""
        columns = []
        if self.balance_train:
            if graph.train_mask is None:
                raise InvalidPartitionArgumentError(
                    "metis: balance_train=True needs a train_mask on the graph")
            train = graph.train_mask.to(torch.int64)
            columns += [train, 1 - train]
        if self.balance_edges:
            if not columns:
                columns.append(torch.ones(graph.num_nodes, dtype=torch.int64))
            # +1 so isolated nodes still weigh something in this constraint.
            columns.append(graph.degree() + 1)
        if not columns:
            return None, 1
        return torch.stack(columns, dim=1).reshape(-1).numpy(), len(columns)
