"""What a ``sample_tree`` request may say, checked.

Every value crosses a socket: their types (bounded lists, ints in range,
names of a bounded length, one seed time per seed) were checked against
:data:`pyg_dist.protocol.ops.SAMPLE_TREE` before the handler ran; here,
how they fit together. The settings come back hashable
(a coordinator keeps a sampler per setting). A homogeneous graph's batch
names its one edge type and its one seed type nil.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc.wire_values import describe


class TreeRequest(NamedTuple):
    """A checked tree request.

    ``settings`` is ``(fan_outs, replace, disjoint, subgraph, weight_attr,
    time_attr, temporal_strategy)``, where ``fan_outs`` is a tuple of ints
    (homogeneous) or of ``(edge_type, fan_outs)`` pairs; ``seeds`` and
    ``seed_time`` are per seed type (``None``: the homogeneous graph's one).
    """

    settings: tuple
    seed: int
    deadline: Optional[float]
    seeds: dict[Optional[str], Tensor]
    seed_time: Optional[dict[Optional[str], Tensor]]

    @property
    def homogeneous(self) -> bool:
        """Whether the batch is a homogeneous graph's (edge type nil)."""
        fanouts = self.settings[0]
        return not fanouts or not isinstance(fanouts[0], tuple)


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
    pairs = tuple(fanouts[0]) if homogeneous else \
        tuple((tuple(t), tuple(k)) for t, k in zip(edge_types, fanouts))
    time_attr = args.get("time_attr")
    settings = (pairs, args.get("replace", False), args.get("disjoint", False),
                args.get("subgraph", "directional"), args.get("weight_attr"), time_attr,
                args.get("temporal_strategy") or "uniform")
    deadline = args.get("timeout")
    return TreeRequest(settings, args["seed"], None if deadline is None else float(deadline),
                       dict(zip(types, tensors[0].split(sizes))),
                       None if time_attr is None else dict(zip(types, tensors[1].split(sizes))))
