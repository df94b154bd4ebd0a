"""The ``metis`` partitioner: METIS (through pymetis) on the undirected graph.

METIS minimises the edge cut under balance constraints. Options mirror DGL's
``partition_graph``: ``balance_train`` adds per-part balance of training
nodes (DGL's ``balance_ntypes=train_mask``: one vertex-weight constraint for
training nodes and one for the rest), ``balance_edges`` adds a constraint on
each part's total degree so parts also carry similar numbers of edges.
On a heterogeneous graph (its homogeneous view, with ``node_type``)
``balance_ntypes`` (on by default there) adds one constraint per node type,
DGL's ``balance_ntypes``: every part gets about ``1/num_parts`` of every
type; with ``balance_train`` each type's constraint is split into its
training and other nodes.
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
        balance_ntypes: On a heterogeneous graph, balance every node type
            across parts (``None``: yes). Ignored on a homogeneous graph.
            Recorded in ``meta.json`` only when given.
    """

    def __init__(self, balance_train: bool = False, balance_edges: bool = False,
                 seed: int = 0, ufactor: Optional[int] = None,
                 recursive: Optional[bool] = None, max_degree: Optional[int] = None,
                 balance_ntypes: Optional[bool] = None) -> None:
        for name, value in (("balance_train", balance_train), ("balance_edges", balance_edges)):
            if not isinstance(value, bool):
                raise InvalidPartitionArgumentError(f"metis: {name} must be true or false, "
                                                    f"got {value!r}")
        if balance_ntypes is not None and not isinstance(balance_ntypes, bool):
            raise InvalidPartitionArgumentError(f"metis: balance_ntypes must be true, false "
                                                f"or null, got {balance_ntypes!r}")
        self.balance_ntypes = balance_ntypes
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
        options = {"balance_train": self.balance_train, "balance_edges": self.balance_edges,
                   "seed": self.seed, "ufactor": self.ufactor, "recursive": self.recursive,
                   "max_degree": self.max_degree}
        # Only when given: a homogeneous dataset's meta.json stays as it was.
        if self.balance_ntypes is not None:
            options["balance_ntypes"] = self.balance_ntypes
        return options

    def memory_estimate(self, num_nodes: int, num_edges: int) -> int:
        """Bytes partitioning a graph of this size in memory takes, roughly:
        the edges (16 B each), the symmetric CSR's keys (16 B per adjacency
        entry) and METIS's coarsening (about 110 B per entry, measured in
        docs/partition-format.md "Performance"), plus torch and PyG (320 MB).
        ``max_degree`` bounds the entries METIS sees to about
        ``2.2 * max_degree`` a node."""
        entries = 2 * num_edges
        if self.max_degree is not None:
            entries = min(entries, int(2.2 * self.max_degree * num_nodes))
        return 16 * num_edges + 16 * num_nodes + 126 * entries + (320 << 20)

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id per node, computed by METIS."""
        import pymetis

        if num_parts == 1:
            return torch.zeros(graph.num_nodes, dtype=torch.int64)
        vweights, ncon = self._vertex_weights(graph, num_parts)
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

    def _vertex_weights(self, graph: PartitionInput,
                        num_parts: int) -> tuple[Optional[np.ndarray], int]:
        """Interleaved vertex weights ``[num_nodes * ncon]`` (``None`` when every
        node weighs 1) and the number of constraints ``ncon``."""
        columns = []
        if self.balance_train:
            if graph.train_mask is None:
                raise InvalidPartitionArgumentError(
                    "metis: balance_train=True needs a train_mask on the graph")
            train = graph.train_mask.to(torch.int64)
            columns += [train, 1 - train]
        if getattr(graph, "node_type", None) is not None and self.balance_ntypes is not False:
            columns = self._type_columns(graph.node_type, columns, num_parts)
        if self.balance_edges:
            if not columns:
                columns.append(torch.ones(graph.num_nodes, dtype=torch.int64))
            # +1 so isolated nodes still weigh something in this constraint.
            columns.append(graph.degree() + 1)
        if len(columns) <= 1:  # one constraint of the same weight everywhere, or none
            return None, 1
        return torch.stack(columns, dim=1).reshape(-1).numpy(), len(columns)

    def _type_columns(self, node_type: Tensor, columns: list[Tensor],
                      num_parts: int) -> list[Tensor]:
        """One constraint per node type (per type and training flag when
        ``columns`` holds the train / other split).

        Empty constraints are left out (METIS cannot balance a total of 0).
        So are constraints too small to balance within METIS's tolerance
        (3 nodes in 2 parts are at best 2 : 1): METIS then fails every
        constraint, not just that one (a 3-node type made a 243-node test
        graph 1.33-imbalanced in every type). Their nodes join one shared
        constraint, or the largest one if that is still too small.
        """
        num_types = int(node_type.max()) + 1 if node_type.numel() else 0
        split = columns or [torch.ones_like(node_type)]
        tolerance = 1 + (self.ufactor if self.ufactor is not None else 30) / 1000

        def balanceable(total: int) -> bool:
            return -(-total // num_parts) * num_parts <= tolerance * total

        out: list[Tensor] = []
        small: Optional[Tensor] = None
        for t in range(num_types):
            is_t = (node_type == t).to(torch.int64)
            for column in split:
                weight = is_t * column
                total = int(weight.sum())
                if total and balanceable(total):
                    out.append(weight)
                elif total:
                    small = weight if small is None else small + weight
        if small is not None:
            if out and not balanceable(int(small.sum())):
                largest = max(range(len(out)), key=lambda i: int(out[i].sum()))
                out[largest] = out[largest] + small
            else:
                out.append(small)
        return out
