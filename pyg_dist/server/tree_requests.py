"""What a ``sample_tree`` request may say, checked.

Every value crosses a socket: their types (bounded lists, ints in range,
names of a bounded length, one seed time per seed) were checked against
:data:`pyg_dist.protocol.ops.SAMPLE_TREE` before the handler ran; here,
how they fit together, and the settings the hop loop reads
(:class:`~pyg_dist.hops.settings.HopSettings`). A homogeneous graph's batch
names its one edge type and its one seed type nil.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from torch import Tensor
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.typing import EdgeType, NodeType

from pyg_dist.errors import ProtocolError, PygDistError
from pyg_dist.hops.settings import HopSettings
from pyg_dist.rpc.wire_values import describe


class TreeRequest(NamedTuple):
    """A checked tree request: its sampling settings (no deadline: the
    coordinator shares the trainer's, ``deadline`` in seconds, among the
    hops), per edge type in the request's order its fan-out per hop, the
    batch's random seed, and the seeds (and with ``time_attr`` their times)
    per node type; a homogeneous graph's types are ``None``."""

    settings: HopSettings
    fanouts: dict[Optional[EdgeType], list[int]]
    seed: int
    deadline: Optional[float]
    seeds: dict[Optional[NodeType], Tensor]
    seed_time: Optional[dict[Optional[NodeType], Tensor]]

    @property
    def homogeneous(self) -> bool:
        """Whether the batch is a homogeneous graph's (edge type nil)."""
        return None in self.fanouts

    @property
    def per_hop(self) -> list[int]:
        """Per hop, the neighbours a node may take over every edge type
        (``-1``: all)."""
        fanouts = list(self.fanouts.values())
        return [-1 if any(k[h] < 0 for k in fanouts) else sum(k[h] for k in fanouts)
                for h in range(len(fanouts[0]))]


def parse_tree(args: dict[str, Any], tensors: list[Tensor]) -> TreeRequest:
    """A ``sample_tree`` request: ``edge_types`` (``[src, rel, dst]`` each,
    or ``[nil]`` for a homogeneous graph) with one fan-out list each in
    ``num_neighbors`` (as many hops each), seeds of the node types
    ``seed_types`` (``[nil]`` likewise), ``sizes`` of them (one seed type
    may leave it out). The arguments' and tensors' types were checked by
    the op's declaration (:data:`pyg_dist.protocol.ops.SAMPLE_TREE`); here,
    how they fit together.

    Raises:
        ProtocolError: naming what is wrong.
    """
    edge_types, fanouts = args["edge_types"], args["num_neighbors"]
    types, sizes = args["seed_types"], args.get("sizes")
    homogeneous = edge_types == [None]
    if len(fanouts) != len(edge_types):
        raise ProtocolError(f"argument 'num_neighbors' must hold one fan-out list per edge "
                            f"type ({len(edge_types)}), got {describe(fanouts)}")
    keys = [None if t is None else tuple(t) for t in edge_types]
    if len(set(keys)) != len(keys):
        raise ProtocolError(f"argument 'edge_types' must list distinct edge types, got "
                            f"{describe(edge_types)}")
    if len({len(k) for k in fanouts}) != 1:
        raise ProtocolError("every edge type needs the same number of hops in "
                            "'num_neighbors'")
    if homogeneous:
        if types != [None]:
            raise ProtocolError(f"argument 'seed_types' must be [nil] for a homogeneous "
                                f"graph's edge type, got {describe(types)}")
    elif None in types or len(set(types)) != len(types):
        raise ProtocolError(f"argument 'seed_types' must list distinct node types, got "
                            f"{describe(types)}")
    if sizes is None and len(types) == 1:
        sizes = [tensors[0].numel()]  # the one seed type has every seed
    if sizes is None or len(sizes) != len(types):
        raise ProtocolError(f"argument 'sizes' must hold one count per seed type, got "
                            f"{describe(sizes)}")
    if sum(sizes) != tensors[0].numel():
        raise ProtocolError(f"'sizes' add up to {sum(sizes)} seeds, the tensor holds "
                            f"{tensors[0].numel()}")
    time_attr, deadline = args.get("time_attr"), args.get("timeout")
    try:
        settings = HopSettings(
            replace=args.get("replace", False),
            disjoint=args.get("disjoint", False) or time_attr is not None,
            subgraph_type=SubgraphType(args.get("subgraph", "directional")),
            weight_attr=args.get("weight_attr"), time_attr=time_attr,
            temporal_strategy=args.get("temporal_strategy") or "uniform")
        settings.check()  # as the trainer's are
    except PygDistError as exc:
        raise ProtocolError(f"tree settings refused: {exc}") from exc
    return TreeRequest(settings, {t: list(k) for t, k in zip(keys, fanouts)}, args["seed"],
                       None if deadline is None else float(deadline),
                       dict(zip(types, tensors[0].split(sizes))),
                       None if time_attr is None else dict(zip(types, tensors[1].split(sizes))))
