"""One hop of neighbour sampling on the servers that own the frontier.

:func:`sample_hop` is the trainer's side of ``sample``:
the frontier of every edge type is split by the partition book of its
destination type, every server gets one request covering every edge type it
owns destinations of (a homogeneous graph's one edge type is nil), all of
them fly at once, and every answer is checked and put
back in the frontier's order (:func:`~pyg_dist.routing.id_router.reassemble`).
Every part samples with its own seed derived from the hop's
(:func:`~pyg_dist.kernels.seeds.mix_seed`), so the answer does not depend
on timing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.typing import EdgeType

from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.hops.settings import HopSettings
from pyg_dist.kernels.seeds import mix_seed
from pyg_dist.partitioning.file_names import edge_ends
from pyg_dist.protocol.ops import SAMPLE, PartRequest, sample_answer_bytes, wire_edge_type
from pyg_dist.routing.id_router import Router, reassemble

Frontier = tuple[Optional[EdgeType], Tensor, Optional[Tensor]]
"""One edge type's share of a hop: ``(edge_type, ids of its destination
type, their seed times or None)``."""


def sample_hop(router: Router, frontiers: Sequence[Frontier],
               num_neighbors: Union[int, Sequence[int]], seed: int, settings: HopSettings,
               num_edges: Optional[Mapping[Optional[EdgeType], int]] = None
               ) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Samples one hop for several edge types at once: one request per
    server covering every edge type it owns destinations of (``sample``),
    all in flight together (one round trip).

    Args:
        router: Routes requests to the owning servers.
        frontiers: ``(edge_type, ids, seed_time)`` per edge type: ids of
            its destination type, and with ``time_attr`` one int64 time
            per id.
        num_neighbors: Fan-out, one for all or one per frontier.
        seed: The hop's random seed; every part draws from its own seed
            derived from it.
        settings: ``replace``, the weight and time attributes, the deadline.
        num_edges: Each edge type's edge count: a server's edge ids past it
            are refused (``None``: not checked).

    Returns:
        ``(counts, neighbours, edge_ids)`` per frontier, in the order of its
        ids: ``counts[i]`` neighbours (global ids) and their global edge ids
        for ``ids[i]``, laid out contiguously.
    """
    fanouts = [int(num_neighbors)] * len(frontiers) if isinstance(num_neighbors, int) \
        else [int(k) for k in num_neighbors]
    shared = {"replace": bool(settings.replace), **settings.attribute_args()}
    time_attr = settings.time_attr
    # Per part, the (frontier, positions, ids, times) it owns.
    owned: dict[int, list[tuple[int, Tensor, Tensor, Optional[Tensor]]]] = {}
    for index, (edge_type, ids, seed_time) in enumerate(frontiers):
        if time_attr is not None and (seed_time is None or seed_time.numel() != ids.numel()):
            raise StoreError(f"time_attr {time_attr!r} needs one seed time per id")
        if not ids.numel():
            continue
        times = None if time_attr is None else seed_time.to(torch.long).view(-1)
        for part, positions, part_ids in router.split(ids, edge_ends(edge_type)[1]):
            owned.setdefault(part, []).append(
                (index, positions, part_ids,
                 None if times is None else times.index_select(0, positions)))
    requests = [_hop_request(part, shares, frontiers, fanouts, shared, seed)
                for part, shares in owned.items()]
    if not requests:
        return [_empty() for _ in frontiers]
    # A server on this host writes its answer into memory the client lends
    # for it (pyg_dist.rpc.shm) when the answer's size is bounded: fan-out
    # times seeds; the rows are copied out (reassembled) before release.
    replies = router.call_all(requests, settings.timeout,
                              reply_bytes=[_answer_bound(r) for r in requests])
    try:
        return _reassembled(router, frontiers, owned, replies, num_edges or {})
    finally:
        for reply in replies:
            reply.release()


def _empty() -> tuple[Tensor, Tensor, Tensor]:
    empty = torch.empty(0, dtype=torch.long)
    return empty, empty, empty


def _answer_bound(request: tuple[int, str, dict, list[Tensor]]) -> Optional[int]:
    """Most bytes a ``sample`` answer takes (int64 counts, neighbours and
    edge ids), or ``None`` when unbounded (a fan-out of -1)."""
    _, _, args, _ = request
    fanouts, sizes = args["num_neighbors"], args["sizes"]
    if min(fanouts) < 0:
        return None
    return sum(sample_answer_bytes(seeds, seeds * k) for seeds, k in zip(sizes, fanouts))


def _reassembled(router: Router, frontiers: Sequence[tuple[Any, Tensor, Any]],
                 owned: dict[int, list[tuple[int, Tensor, Tensor, Optional[Tensor]]]],
                 replies: list[Any], num_edges: Mapping[Optional[EdgeType], int]
                 ) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Every frontier's answer, checked, in frontier order, in memory of its
    own (never a view of a reply: those may lie in lent memory)."""
    answers: list[list[tuple[Tensor, list[Tensor]]]] = [[] for _ in frontiers]
    # Every reply was checked against its request (pyg_dist.protocol.ops): three
    # aligned tensors per edge type, as many counts as seeds.
    lent: list[Tensor] = []  # views of memory lent for a reply (valid until release)
    for part, shares, reply in zip(owned.keys(), owned.values(), replies):
        tensors = list(reply.tensors)
        if getattr(reply, "on_release", None) is not None:
            lent += tensors
        for k, (index, positions, _, _) in enumerate(shares):
            _check_neighbours(router, part, frontiers[index][0], tensors[3 * k + 1],
                              tensors[3 * k + 2], num_edges)
            answers[index].append((positions, tensors[3 * k:3 * k + 3]))
    out = []
    for (_, ids, _), answer in zip(frontiers, answers):
        if not answer:
            out.append(_empty())
            continue
        counts, (nbrs, eids) = reassemble(
            ids.numel(), [p for p, _ in answer], [t[0] for _, t in answer],
            [(t[1], t[2]) for _, t in answer])
        # One owner answering in order: reassemble hands its tensors back as is.
        out.append(tuple(t.clone() if any(t is v for v in lent) else t
                         for t in (counts, nbrs, eids)))
    return out

def _check_neighbours(router: Router, part: int, edge_type: Optional[EdgeType],
                      nbrs: Tensor, eids: Tensor,
                      num_edges: Mapping[Optional[EdgeType], int]) -> None:
    """Refuses neighbour ids past the graph's nodes of their type, and edge
    ids past its edges of the edge type, naming the server that sent them
    (the reply check saw counts and signs only: the graph's size is known
    here). A lying peer's ids must not reach a batch, nor fail later naming
    whoever reads them (a coordinator)."""
    if not nbrs.numel():
        return
    checks = [("neighbour", nbrs, router.num_nodes_of(edge_ends(edge_type)[0]),
               "nodes of its type")]
    if edge_type in num_edges:
        checks.append(("edge", eids, num_edges[edge_type], "edges of its edge type"))
    for what, ids, limit, of in checks:
        top = int(ids.max())
        if top >= limit:
            address = router.endpoints[part]
            raise ProtocolError(f"server {address} answered 'sample' with {what} id {top}, "
                                f"past the {limit} {of}: a broken or lying server",
                                address=address, op="sample")


def _hop_request(part: int, shares: list[tuple[int, Tensor, Tensor, Optional[Tensor]]],
                 frontiers: Sequence[tuple[Any, Tensor, Any]], fanouts: list[int],
                 shared: dict[str, Any], seed: int) -> PartRequest:
    """One server's request of a hop: a ``sample`` of every edge type it
    owns destinations of (nil: a homogeneous graph's one)."""
    tensors = [torch.cat([ids for _, _, ids, _ in shares])]
    if shares[0][3] is not None:
        tensors.append(torch.cat([times for _, _, _, times in shares]))
    return SAMPLE.request(part, {
        **shared, "seed": mix_seed(seed, part),
        "edge_types": [wire_edge_type(frontiers[index][0]) for index, _, _, _ in shares],
        "sizes": [ids.numel() for _, _, ids, _ in shares],
        "num_neighbors": [fanouts[index] for index, _, _, _ in shares]}, tensors)

