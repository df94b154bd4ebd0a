"""``sample``'s request: one hop over one or more edge types.

A heterogeneous hop samples every edge type at once. Sent as one request per
edge type, a hop over 6 edge types and 2 parts would be 12 requests; sent as
one ``sample`` per server it is 2. The request names its edge types and how
many seed ids each has; the ids (and, temporal, the seed times) of all of
them travel as one tensor each, edge type after edge type. A homogeneous
graph's one edge type is nil. Every edge type is served by the same path,
and the answer is every edge type's ``counts``, ``neighbours`` and
``edge_ids`` in the order asked.

Arguments (their types declared in :data:`pyg_dist.protocol.ops.SAMPLE`):
``edge_types`` (a non-empty list of nil or ``[src, rel, dst]``), ``sizes`` (seeds per edge type,
non-negative ints summing to the ids' length; one edge type may leave it
out), ``num_neighbors`` (one int for all, or one per edge type), ``seed``
(edge type *i* samples with ``mix_seed(seed, i)``), and the other arguments
(``replace``, ``weight_attr``, ``time_attr``, ``temporal_strategy``), the
same for all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.kernels.seeds import mix_seed
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.requests import split_by_sizes


def split_typed_request(args: dict[str, Any], tensors: list[Tensor]
                        ) -> Iterator[tuple[dict[str, Any], list[Tensor]]]:
    """The per-edge-type requests a ``sample`` stands for: ``(args, tensors)``
    with ``edge_type`` and that type's own ``num_neighbors`` and ``seed``.

    Raises:
        ProtocolError: on sizes or fan-outs that do not match the edge types
            (checked whole before the first edge type is yielded).
    """
    edge_types, fanouts = args["edge_types"], args["num_neighbors"]
    if "sizes" not in args and len(edge_types) == 1:
        slices = [tensors]  # the one edge type has every seed
    else:
        slices = split_by_sizes(args, tensors, len(edge_types), "sample", max_tensors=2)
    if isinstance(fanouts, int):
        fanouts = [fanouts] * len(edge_types)
    if len(fanouts) != len(edge_types):
        raise ProtocolError(f"argument 'num_neighbors' must be an int or one int per edge "
                            f"type ({len(edge_types)}), got {describe(fanouts)}")
    seed = args.get("seed")
    shared = {k: v for k, v in args.items()
              if k not in ("edge_types", "sizes", "num_neighbors", "seed")}
    for index, (edge_type, part, fanout) in enumerate(zip(edge_types, slices, fanouts)):
        sub = {**shared, "edge_type": edge_type, "num_neighbors": fanout}
        if seed is not None:
            sub["seed"] = mix_seed(seed, index)
        yield sub, part
