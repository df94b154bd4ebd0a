"""``num_neighbors`` as the user gives it, checked against the served graph's
edge types (:class:`~pyg_dist.sampler.DistNeighborSampler`, the loaders, and
a server coordinating ``sample_tree``)."""

from __future__ import annotations

from typing import Any, Optional, Union

from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.typing import EdgeType

from pyg_dist.errors import GraphKindMismatchError, SamplerError
from pyg_dist.partitioning.type_keys import edge_type_key


def check_num_neighbors(num_neighbors: Union[list[int], NumNeighbors, dict],
                        edge_types: list[Optional[EdgeType]]
                        ) -> Union[list[int], dict[EdgeType, list[int]]]:
    """The fan-outs as a list (homogeneous graph) or ``{edge_type: list}``
    covering every edge type of a heterogeneous one, in the graph's order.

    Args:
        num_neighbors: A list of ints (every edge type), PyG's
            ``NumNeighbors``, or ``{edge_type: list}`` (edge types as tuples
            or PyG's ``"src__rel__dst"`` strings).
        edge_types: The graph's edge types, in its order (``[None]``: a
            homogeneous graph).

    Raises:
        GraphKindMismatchError: for a dict on a homogeneous graph.
        SamplerError: on a missing edge type, hops of different counts,
            or values that are not ints >= -1.
    """
    values = num_neighbors.values if isinstance(num_neighbors, NumNeighbors) else num_neighbors
    hetero = edge_types != [None]
    if isinstance(values, dict):
        if not hetero:
            raise GraphKindMismatchError(
                "num_neighbors per edge type was given, but the served graph is homogeneous; "
                "pass a list of ints")
        given = {edge_type_key(tuple(k) if isinstance(k, (tuple, list)) else _edge_type_of(k),
                               edge_types, "the served graph"): v for k, v in values.items()}
        missing = [t for t in edge_types if t not in given]
        if missing:
            raise SamplerError(f"num_neighbors has no fan-out for edge type(s) "
                               f"{', '.join(map(str, missing[:8]))}; give every edge type "
                               f"one (or pass one list for all)")
        out = {t: _fan_outs(given[t], f"num_neighbors[{t}]") for t in edge_types}
        if len({len(v) for v in out.values()}) != 1:
            raise SamplerError(f"every edge type needs the same number of hops in "
                               f"num_neighbors, got {sorted({len(v) for v in out.values()})}")
        return out
    fan_outs = _fan_outs(values, "num_neighbors")
    if hetero:
        return {t: list(fan_outs) for t in edge_types}
    return fan_outs


def _edge_type_of(key: Any) -> Any:
    """PyG writes edge types as ``"src__rel__dst"`` strings in some places."""
    if isinstance(key, str) and key.count("__") == 2:
        return tuple(key.split("__"))
    return key


def _fan_outs(values: Any, what: str) -> list[int]:
    try:
        values = [int(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise SamplerError(f"{what} must be a list of ints (-1 for all neighbours), "
                           f"got {values!r}") from exc
    if not values or any(v < -1 for v in values):
        raise SamplerError(f"{what} must be a non-empty list of ints >= -1 (-1 takes "
                           f"all neighbours), got {values}")
    return values
