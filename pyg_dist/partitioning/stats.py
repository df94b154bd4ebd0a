"""Counts of a partitioned graph: per part (:class:`PartStats`) and for the
whole graph (:func:`summarize`), as ``meta.json`` records them and
``pyg-dist info`` prints them.

Pure Python: both the in-memory writer and the out-of-core one (which runs
without torch) fill them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PartStats:
    """Counts of one part, recorded in ``meta.json`` and shown by ``pyg-dist info``.

    Args:
        num_nodes: Owned nodes.
        num_edges: Incoming edges of owned nodes.
        num_halo_nodes: Distinct sources of those edges owned by other parts.
        num_cut_edges: Those edges whose source another part owns.
        num_train_nodes: Owned nodes in ``train_mask`` (0 without a mask).
    """

    num_nodes: int
    num_edges: int
    num_halo_nodes: int
    num_cut_edges: int
    num_train_nodes: int = 0

    def to_json(self) -> dict[str, int]:
        """The counts as a JSON-safe dict."""
        return dict(self.__dict__)

    @classmethod
    def of_entries(cls, node_entries: list[dict[str, Any]],
                   edge_entries: list[dict[str, Any]]) -> PartStats:
        """A part's counts summed over its ``meta.json`` entries per node type
        (``num_nodes``, ``num_halo_nodes``, ``num_train_nodes``) and per edge
        type (``num_edges``, ``num_cut_edges``)."""
        return cls(num_nodes=sum(e["num_nodes"] for e in node_entries),
                   num_edges=sum(e["num_edges"] for e in edge_entries),
                   num_halo_nodes=sum(e["num_halo_nodes"] for e in node_entries),
                   num_cut_edges=sum(e["num_cut_edges"] for e in edge_entries),
                   num_train_nodes=sum(e["num_train_nodes"] for e in node_entries))


def balance(counts: list[int]) -> float:
    """Largest part / mean part of per-part counts (1.0 when they are all 0)."""
    total = sum(counts)
    return max(counts) * len(counts) / total if total else 1.0


def summarize(stats: list[PartStats], num_nodes: int, num_edges: int) -> dict[str, float]:
    """Whole-graph statistics: edge cut and balance (max part / mean part)."""
    cut = sum(s.num_cut_edges for s in stats)
    return {
        "edge_cut": cut,
        "edge_cut_fraction": cut / num_edges if num_edges else 0.0,
        "node_balance": balance([s.num_nodes for s in stats]),
        "edge_balance": balance([s.num_edges for s in stats]),
        "total_halo_nodes": sum(s.num_halo_nodes for s in stats),
    }


def one_type_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts' ``meta.json`` entries as format version 1 (a homogeneous
    graph) keeps them: of its one node and edge type, the file and count
    only (the part's ``stats`` hold the rest)."""
    return [{**p, "node_types": [{n: p["node_types"][0][n] for n in ("type", "file", "num_nodes")}],
             "edge_types": [{n: p["edge_types"][0][n] for n in ("type", "file", "num_edges")}]}
            for p in parts]
