"""Pure-torch stand-ins for the pyg-lib operators PyG's distributed sampler calls.

PyG's deprecated ``torch_geometric.distributed.DistNeighborSampler`` calls three
C++ operators from pyg-lib: ``torch.ops.pyg.dist_neighbor_sample``,
``torch.ops.pyg.merge_sampler_outputs`` and ``torch.ops.pyg.relabel_neighborhood``.
pyg-lib has no wheel on the index this project can reach, so the benchmark
registers the functions below under the same names and schemas with
:mod:`torch.library` (namespace ``pyg``) in the baseline's processes only.

Every function here is labelled in its docstring and in the benchmark's output
as a **pure-torch stand-in for pyg-lib's** operator. Each one reproduces the
semantics of the C++ kernel it replaces (read from pyg-lib's
``csrc/sampler/cpu/neighbor_kernel.cpp`` (``distributed=true`` path),
``dist_merge_outputs_kernel.cpp`` and ``dist_relabel_kernel.cpp``) for the
options the homogeneous node loader uses: uniform sampling with or without
replacement, no time, no edge weights, not disjoint. Other options raise
``NotImplementedError`` rather than silently doing something else. They are
vectorised (no Python loop over nodes; Floyd's subset
sampling runs as ``k`` tensor steps per hop), so the comparison
measures PyG's design (torch RPC, pickling, per-hop round trips, numpy
de-duplication) rather than a slow kernel.

It also holds the one fix PyG's module needs to run at all:
``DistNeighborSampler.__init__`` calls ``warnings.warn(..., stack_level=2)``,
which raises ``TypeError`` on every Python version (the keyword is
``stacklevel``); see :func:`patch_pyg_distributed_warn`.
"""

from __future__ import annotations

import logging
import warnings
from typing import Optional

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

STANDIN_LABEL = "pure-torch stand-in for pyg-lib's dist_neighbor_sample"

# Schemas copied from pyg-lib (csrc/sampler/neighbor.cpp, dist_merge_outputs.cpp,
# dist_relabel.cpp) so that PyG's call sites bind exactly as they would to
# pyg-lib.
_SCHEMAS = {
    "dist_neighbor_sample": (
        "dist_neighbor_sample(Tensor rowptr, Tensor col, Tensor seed, int num_neighbors, "
        "Tensor? node_time=None, Tensor? edge_time=None, Tensor? seed_time=None, "
        "Tensor? edge_weight=None, bool csc=False, bool replace=False, bool directed=True, "
        "bool disjoint=False, str temporal_strategy='uniform') -> (Tensor, Tensor, int[])"),
    "merge_sampler_outputs": (
        "merge_sampler_outputs(Tensor[] node_ids, Tensor[] edge_ids, "
        "int[][] cumsum_neighbors_per_node, int[] partition_ids, int[] partition_orders, "
        "int num_partitions, int num_neighbors, Tensor? batch=None, bool disjoint=False) "
        "-> (Tensor, Tensor, Tensor?, int[])"),
    "relabel_neighborhood": (
        "relabel_neighborhood(Tensor seed, Tensor sampled_nodes_with_dupl, "
        "int[] sampled_nbrs_per_node, int num_nodes, Tensor? batch=None, bool csc=False, "
        "bool disjoint=False) -> (Tensor, Tensor)"),
}

# Keeps the torch.library registration alive for the life of the process.
_LIBRARY: Optional[torch.library.Library] = None

# pyg-lib's Mapper uses a dense array below this many nodes (or when the
# batch touches more than a tenth of them), a hash map above.
_DENSE_MAPPER_NODES = 1_000_000

# Floyd's algorithm costs O(k^2) per node; above this fan-out, sort instead.
_FLOYD_MAX_K = 64


def _long(values: list[int]) -> Tensor:
    """An int64 tensor from a list of ints (via numpy: ~10x faster than torch.tensor)."""
    return torch.from_numpy(np.asarray(values, dtype=np.int64).reshape(-1))


def _segments(counts: Tensor) -> tuple[Tensor, Tensor]:
    """Segment id and rank within the segment of every slot of a ragged array.

    Args:
        counts: Number of slots per segment (int64, 1-D).

    Returns:
        ``(seg, rank)``, each of length ``counts.sum()``.
    """
    seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    ptr = torch.cumsum(counts, 0) - counts
    rank = torch.arange(seg.numel()) - ptr[seg]
    return seg, rank


def _sample_positions(start: Tensor, deg: Tensor, count: Tensor, num_neighbors: int,
                      replace: bool) -> Tensor:
    """CSC positions of the sampled edges, grouped by seed in seed order.

    Mirrors ``NeighborSampler::_sample`` in pyg-lib: the full neighbourhood in
    CSC order when ``num_neighbors < 0`` or (without replacement) when it is at
    least the degree; ``count`` uniform draws with replacement; otherwise a
    uniform random subset of ``count`` distinct neighbours (Floyd's algorithm,
    as pyg-lib; random keys sorted per seed for fan-outs above 64).

    Args:
        start: ``rowptr[seed]``.
        deg: In-degree of every seed.
        count: How many neighbours each seed gets.
        num_neighbors: The fan-out asked for.
        replace: Sample with replacement.
    """
    k = num_neighbors
    if 0 <= k <= _FLOYD_MAX_K and not replace:
        # A [seeds, k] grid: Floyd offsets for seeds with more than k
        # neighbours, 0..k-1 (CSC order) for the others; cells past count drop.
        cols = torch.arange(k)
        offsets = torch.where((deg > k).unsqueeze(1), _floyd_subsets(deg, k), cols)
        return (start.unsqueeze(1) + offsets)[cols < count.unsqueeze(1)]
    seg, rank = _segments(count)
    if replace and k >= 0:
        draw = (torch.rand(seg.numel(), dtype=torch.float64) * deg[seg]).long()
        return start[seg] + torch.minimum(draw, deg[seg] - 1)
    pos = start[seg] + rank  # full neighbourhoods, CSC order
    partial = count < deg
    if bool(partial.any()):
        # Large fan-out: a random key per candidate edge, sorted within each
        # seed's segment (segment id + U[0, 1)); the first k are kept.
        p_deg = deg[partial]
        e_seg, e_rank = _segments(p_deg)
        order = torch.argsort(e_seg.to(torch.float64)
                              + torch.rand(e_seg.numel(), dtype=torch.float64))
        keep = e_rank < k
        e_ptr = torch.cumsum(p_deg, 0) - p_deg
        chosen = order[keep] - e_ptr[e_seg[keep]]
        pos[partial[seg]] = start[partial].repeat_interleave(k) + chosen
    return pos


def _floyd_subsets(population: Tensor, k: int) -> Tensor:
    """A uniform random ``k``-subset of ``range(n)`` for every ``n`` in ``population``.

    Robert Floyd's algorithm, the one pyg-lib runs per node (``IndexTracker``:
    for ``i`` in ``n-k .. n-1`` draw ``r`` in ``[0, i]``; take ``i`` instead if
    ``r`` was already taken), vectorised over nodes: ``k`` steps, each a
    ``[P, j]`` comparison, no sort. Rows with ``n <= k`` hold garbage (the
    caller takes their whole neighbourhood instead).

    Args:
        population: Neighbourhood size of every node.
        k: Subset size.

    Returns:
        ``[P, k]`` offsets, distinct within each row, in draw order.
    """
    taken = torch.empty(population.numel(), k, dtype=torch.long)
    draws = torch.rand(population.numel(), k, dtype=torch.float64)
    for j in range(k):
        top = population - k + j  # draw in [0, top]
        r = (draws[:, j] * (top + 1)).long().minimum(top)
        if j:
            r = torch.where((taken[:, :j] == r.unsqueeze(1)).any(1), top, r)
        taken[:, j] = r
    return taken


def dist_neighbor_sample(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: int,
                         node_time: Optional[Tensor] = None,
                         edge_time: Optional[Tensor] = None,
                         seed_time: Optional[Tensor] = None,
                         edge_weight: Optional[Tensor] = None, csc: bool = False,
                         replace: bool = False, directed: bool = True,
                         disjoint: bool = False,
                         temporal_strategy: str = "uniform") -> tuple[Tensor, Tensor, list[int]]:
    """Pure-torch stand-in for pyg-lib's ``dist_neighbor_sample`` (one hop).

    As in pyg-lib's ``distributed=true`` kernel: no de-duplication; the
    returned nodes are the seeds followed by every sampled neighbour (with
    duplicates); edge ids are CSC positions (``row_start + offset``), and
    ``cumsum[0] = len(seed)``, ``cumsum[i + 1] = cumsum[i] + count_i``.

    Args:
        rowptr: CSC pointer over destination nodes (``colptr``).
        col: Source node of every CSC entry (``row``).
        seed: Destination nodes to sample neighbours for.
        num_neighbors: Fan-out; ``-1`` takes every neighbour.
        node_time: Unsupported (temporal sampling).
        edge_time: Unsupported (temporal sampling).
        seed_time: Unsupported (temporal sampling).
        edge_weight: Unsupported (biased sampling).
        csc: Layout flag; ignored for one-hop output, as in pyg-lib.
        replace: Sample with replacement.
        directed: Must be ``True`` (pyg-lib rejects undirected too).
        disjoint: Unsupported.
        temporal_strategy: Ignored without time.

    Returns:
        ``(node, edge, cumsum_neighbors_per_node)``.
    """
    if any(t is not None for t in (node_time, edge_time, seed_time, edge_weight)) or disjoint:
        raise NotImplementedError(
            f"{STANDIN_LABEL}: temporal, weighted and disjoint sampling are not implemented; "
            "the baseline only runs uniform homogeneous node sampling")
    if not directed:
        raise NotImplementedError("Undirected subgraphs not yet supported (as in pyg-lib)")
    seed = seed.to(torch.long)
    start = rowptr[seed]
    deg = rowptr[seed + 1] - start
    if num_neighbors < 0:
        count = deg
    elif replace:
        count = torch.where(deg > 0, num_neighbors, 0)
    else:
        count = deg.clamp(max=num_neighbors)
    pos = _sample_positions(start, deg, count, num_neighbors, replace)
    node = torch.cat([seed, col[pos]])
    cumsum = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(count, 0)])
    return node, pos, (cumsum + seed.numel()).tolist()


def merge_sampler_outputs(node_ids: list[Tensor], edge_ids: list[Tensor],
                          cumsum_neighbors_per_node: list[list[int]],
                          partition_ids: list[int], partition_orders: list[int],
                          num_partitions: int, num_neighbors: int,
                          batch: Optional[Tensor] = None,
                          disjoint: bool = False
                          ) -> tuple[Tensor, Tensor, Optional[Tensor], list[int]]:
    """Pure-torch stand-in for pyg-lib's ``merge_sampler_outputs``.

    Puts the one-hop outputs of several partitions back into the order of the
    hop's source nodes: source ``j`` lives on ``partition_ids[j]`` at position
    ``partition_orders[j]``; its neighbours are ``node_ids[p][cs[o]:cs[o+1]]``
    (seeds skipped) and its edges ``edge_ids[p][cs[o]-cs[0]:cs[o+1]-cs[0]]``,
    with ``cs = cumsum_neighbors_per_node[p]``.

    Args:
        node_ids: Per partition, seeds then sampled nodes (``dist_neighbor_sample``).
        edge_ids: Per partition, sampled edge ids.
        cumsum_neighbors_per_node: Per partition, the cumsum list.
        partition_ids: Partition of every source node.
        partition_orders: Position of every source node within its partition.
        num_partitions: Number of partitions.
        num_neighbors: Fan-out of the hop (unused: output is ragged, not padded).
        batch: Subgraph id of every source node (disjoint mode only).
        disjoint: Disjoint mode.

    Returns:
        ``(node_with_dupl, edge, batch, sampled_nbrs_per_node)``.
    """
    if disjoint and batch is None:
        raise ValueError("merge_sampler_outputs: 'batch' is required when disjoint")
    pid = _long(partition_ids)
    order = _long(partition_orders)
    cs = [_long(c) for c in cumsum_neighbors_per_node]
    cs_len = torch.tensor([c.numel() for c in cs], dtype=torch.long)
    cs_cat = torch.cat(cs) if cs else torch.empty(0, dtype=torch.long)
    cs_off = torch.cumsum(cs_len, 0) - cs_len
    n_len = torch.tensor([t.numel() for t in node_ids], dtype=torch.long)
    e_len = torch.tensor([t.numel() for t in edge_ids], dtype=torch.long)
    n_off = torch.cumsum(n_len, 0) - n_len
    e_off = torch.cumsum(e_len, 0) - e_len

    at = cs_off[pid] + order
    begin, end, first = cs_cat[at], cs_cat[at + 1], cs_cat[cs_off[pid]]
    cnt = end - begin
    seg, rank = _segments(cnt)
    node = torch.cat(node_ids)[n_off[pid][seg] + begin[seg] + rank]
    edge = torch.cat(edge_ids)[e_off[pid][seg] + (begin - first)[seg] + rank]
    out_batch = batch[seg] if disjoint else None
    return node, edge, out_batch, cnt.tolist()


def relabel_neighborhood(seed: Tensor, sampled_nodes_with_dupl: Tensor,
                         sampled_nbrs_per_node: list[int], num_nodes: int,
                         batch: Optional[Tensor] = None, csc: bool = False,
                         disjoint: bool = False) -> tuple[Tensor, Tensor]:
    """Pure-torch stand-in for pyg-lib's ``relabel_neighborhood``.

    Seeds take local ids ``0..len(seed)-1``; every other node takes the next
    free id at its first appearance in ``sampled_nodes_with_dupl`` (pyg-lib's
    ``Mapper``). Source ``i`` (the i-th entry of ``sampled_nbrs_per_node``)
    links to its ``sampled_nbrs_per_node[i]`` neighbours.

    Args:
        seed: The batch's seed nodes (unique).
        sampled_nodes_with_dupl: All hops' sampled nodes, with duplicates.
        sampled_nbrs_per_node: Neighbours sampled per source, all hops.
        num_nodes: Number of nodes in the graph (sizes the dense mapper).
        batch: Unsupported (disjoint mode).
        csc: Return ``(neighbour, source)`` instead of ``(source, neighbour)``.
        disjoint: Unsupported.

    Returns:
        ``(row, col)`` of the sampled subgraph in local ids.
    """
    if disjoint:
        raise NotImplementedError(f"{STANDIN_LABEL}: disjoint relabelling is not implemented")
    counts = _long(sampled_nbrs_per_node)
    src = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    every = torch.cat([seed, sampled_nodes_with_dupl])
    positions = torch.arange(every.numel())
    if num_nodes <= _DENSE_MAPPER_NODES or every.numel() > num_nodes // 10:
        # Dense mapper: first position of every node id, no sort.
        first = torch.full((num_nodes,), every.numel(), dtype=torch.long)
        first.scatter_reduce_(0, every, positions, reduce="amin")
        is_first = first[every] == positions
        local_of = torch.empty(num_nodes, dtype=torch.long)
        local_of[every[is_first]] = torch.arange(int(is_first.sum()))
        nbr = local_of[sampled_nodes_with_dupl]
        return (nbr, src) if csc else (src, nbr)
    uniq, inverse = torch.unique(every, return_inverse=True)
    first = torch.full((uniq.numel(),), every.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, positions, reduce="amin")
    local = torch.empty_like(first)
    local[torch.argsort(first)] = torch.arange(uniq.numel())
    nbr = local[inverse[seed.numel():]]
    return (nbr, src) if csc else (src, nbr)


def install_pyg_lib_standins() -> list[str]:
    """Register the stand-ins as ``torch.ops.pyg.*`` where pyg-lib is absent.

    Only operators that ``torch.ops.pyg`` lacks are registered, so a real
    pyg-lib (if ever installed) is used as is. Call this in the baseline's
    processes only.

    Returns:
        The names of the operators that were registered.
    """
    global _LIBRARY
    impls = {"dist_neighbor_sample": dist_neighbor_sample,
             "merge_sampler_outputs": merge_sampler_outputs,
             "relabel_neighborhood": relabel_neighborhood}
    missing = [name for name in impls if not hasattr(torch.ops.pyg, name)]
    if not missing:
        return []
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("pyg", "FRAGMENT")
    for name in missing:
        _LIBRARY.define(_SCHEMAS[name])
        # CompositeImplicitAutograd: one Python kernel for every backend, and
        # callable with no tensor argument (merge of empty outputs).
        _LIBRARY.impl(name, impls[name], "CompositeImplicitAutograd")
    logger.info("registered %s for torch.ops.pyg.%s", STANDIN_LABEL, ", ".join(missing))
    return missing


def _warn_accepting_stack_level(message, category=None, stacklevel: int = 1, source=None,
                                *, stack_level: Optional[int] = None) -> None:
    """``warnings.warn`` that also accepts PyG's misspelt ``stack_level``."""
    # +1: skip this wrapper's own frame.
    warnings.warn(message, category, (stack_level or stacklevel) + 1, source)


def patch_pyg_distributed_warn() -> list[str]:
    """Make PyG's ``warn(..., stack_level=2)`` calls warn instead of crash.

    ``torch_geometric.distributed.dist_neighbor_sampler`` and
    ``dist_neighbor_loader`` do ``from warnings import warn`` and call it with
    the invalid keyword ``stack_level``; every ``DistNeighborSampler`` raises
    ``TypeError`` before doing any work. The module-level name ``warn`` in those
    two modules is replaced by a wrapper that maps ``stack_level`` to
    ``stacklevel``; nothing else changes.

    Returns:
        The patched ``module.warn`` names.
    """
    import torch_geometric.distributed.dist_neighbor_loader as loader_mod
    import torch_geometric.distributed.dist_neighbor_sampler as sampler_mod

    patched = []
    for mod in (sampler_mod, loader_mod):
        if getattr(mod, "warn", None) is warnings.warn:
            mod.warn = _warn_accepting_stack_level
            patched.append(f"{mod.__name__}.warn")
    return patched
