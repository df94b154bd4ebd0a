"""Checking the node and edge types a caller names against a graph's.

A homogeneous graph has one node type and one edge type, both ``None``; a
heterogeneous one names its node types (``"movie"``) and edge types
(``("movie", "to", "director")``), and, as in PyG, a relation name alone
names the one edge type that has it. The partition reader (files) and the
trainer-side stores (a served graph) check types with the same functions, so
both refuse the same calls with the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyg_dist.errors import GraphKindMismatchError, UnknownTypeError
from pyg_dist.partitioning.format import EdgeTypeKey, NodeTypeKey


def _check_kind(type_: Any, types: Sequence[Any], what: str, where: str) -> None:
    hetero = None not in types
    if hetero and type_ is None:
        shown = ", ".join(map(str, types[:8])) + (", ..." if len(types) > 8 else "")
        raise GraphKindMismatchError(
            f"{where} holds a heterogeneous graph: name the {what} (it has {shown})")
    if not hetero and type_ is not None:
        raise GraphKindMismatchError(
            f"{where} holds a homogeneous graph, which has no {what}s (got {type_!r}); "
            f"pass None or use the homogeneous API")


def node_type_key(node_type: Any, node_types: Sequence[NodeTypeKey], where: str
                  ) -> NodeTypeKey:
    """Checks a node type against a graph's and returns its key.

    Args:
        node_type: The type asked for (``None`` on a homogeneous graph).
        node_types: The graph's node types (``[None]`` when homogeneous).
        where: Names the graph in messages (a path, "the servers").

    Raises:
        GraphKindMismatchError: a named type on a homogeneous graph, or
            ``None`` on a heterogeneous one.
        UnknownTypeError: a name the graph does not have.
    """
    _check_kind(node_type, node_types, "node type", where)
    if node_type not in node_types:
        raise UnknownTypeError("node", node_type, list(node_types))
    return node_type


def edge_type_key(edge_type: Any, edge_types: Sequence[EdgeTypeKey], where: str
                  ) -> EdgeTypeKey:
    """Checks an edge type and returns its ``(src, rel, dst)`` key.

    Args:
        edge_type: ``(src, rel, dst)``, a relation name that one edge type
            has, or ``None`` on a homogeneous graph.
        edge_types: The graph's edge types (``[None]`` when homogeneous).
        where: Names the graph in messages.

    Raises:
        GraphKindMismatchError: a named type on a homogeneous graph, or
            ``None`` on a heterogeneous one.
        UnknownTypeError: a type the graph does not have, or a relation
            name shared by several edge types.
    """
    _check_kind(edge_type, edge_types, "edge type", where)
    if edge_type is None:
        return None
    if isinstance(edge_type, str):
        matches = [t for t in edge_types if t[1] == edge_type]
        if len(matches) == 1:
            return matches[0]
    elif isinstance(edge_type, (tuple, list)) and tuple(edge_type) in edge_types:
        return tuple(edge_type)
    raise UnknownTypeError("edge", edge_type, list(edge_types))
