"""A ``sample_tree`` reply's nodes grouped by owning part (``owners: true``).

The coordinator of a homogeneous tree knows every node's owner from its
partition book; asked with ``owners``, it answers, after the tree's tensors
(:mod:`pyg_dist.protocol.tree_codec`), one more: ``owner_order``, int64, the
positions of the tree's nodes grouped by owning part (parts ascending, each
part's positions ascending: what ``PartitionBook.split`` gives), and in its
result ``owner_counts``, how many positions each part has (one count per
part of the graph). The trainer then fetches the batch's rows from each
owner without looking every node up in its own copy of the book
(:mod:`pyg_dist.sampler.server_hops`, :mod:`pyg_dist.store.known_owners`).

What the trainer checks (:func:`check`): one more tensor, 1-D int64, a
permutation of the nodes' positions (so every row of the batch is asked of
some owner); counts that are non-negative ints adding up to the nodes. A
coordinator that lies about an owner sends a node's id to a server that
does not own it, which refuses it (every server checks the ids it is asked
for); the rows a batch receives are the owners' word either way.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from pyg_dist.partitioning.book import shares_by_part
from pyg_dist.protocol import tree_codec, tree_rows
from pyg_dist.protocol.reply_checks import bounds, shape_text
from pyg_dist.rpc.wire_values import describe

# Most parts an answer may count (a partition book's bound: int16 parts).
MAX_PARTS = 1 << 15


def asked(args: dict[str, Any]) -> bool:
    """Whether a tree request asks for its nodes grouped by owner."""
    return args.get("owners") is True


def encode(shares: list[tuple[int, Tensor, Tensor]], num_parts: int
           ) -> tuple[list[int], Tensor]:
    """``(owner_counts, owner_order)`` from a partition book's ``split`` of
    the tree's nodes (``(part, positions, ids)`` per owning part)."""
    counts = [0] * num_parts
    for part, positions, _ in shares:
        counts[part] = int(positions.numel())
    order = torch.cat([positions for _, positions, _ in shares]) if shares else \
        torch.empty(0, dtype=torch.int64)
    return counts, order.to(torch.int64)


def check(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
          reply: list[Tensor]) -> Optional[str]:
    """``sample_tree``'s reply check: :func:`tree_codec.check
    <pyg_dist.protocol.tree_codec.check>`, and with ``owners`` the order and
    counts after the tree (see the module), and with ``rows`` its outcome
    (:func:`pyg_dist.protocol.tree_rows.check`)."""
    if not asked(args):
        return tree_codec.check(args, tensors, result, reply)
    if not reply:
        return "no tensors, where a tree and its owner order were due"
    problem = tree_codec.check(args, tensors, result, reply[:-1]) or \
        _order_problem(result.get("owner_counts"), reply[-1], reply[0].numel())
    if problem is None and tree_rows.asked(args):
        return tree_rows.check(args, result)
    return problem


def _order_problem(counts: Any, order: Tensor, num_nodes: int) -> Optional[str]:
    if not isinstance(counts, list) or not 0 < len(counts) <= MAX_PARTS or \
            not all(type(c) is int and c >= 0 for c in counts):
        return f"owner counts {describe(counts)}, where one count >= 0 per part was due"
    if sum(counts) != num_nodes:
        return f"owner counts adding up to {sum(counts)}, for {num_nodes} nodes"
    if order.dim() != 1 or order.dtype != torch.int64 or order.numel() != num_nodes:
        return f"an owner order {shape_text(order)}, where int64 of [{num_nodes}] was due"
    low, high = bounds(order)
    if order.numel() and not 0 <= low <= high < num_nodes:
        return f"owner order entries from {low} to {high}, outside the {num_nodes} nodes"
    # Every node once: each output row is then asked of some owner, so none
    # is left unwritten (numpy's mask: ~0.1 ms for 145k nodes on one core,
    # half of torch's index_fill_).
    covered = np.zeros(num_nodes, dtype=bool)
    covered[order.numpy()] = True
    if not covered.all():
        return "an owner order that names a node twice (and leaves another out)"
    return None


def shares_of(node: Tensor, counts: list[int], order: Tensor
              ) -> list[tuple[int, Tensor, Tensor]]:
    """The checked order as ``PartitionBook.split`` of ``node`` gives it:
    ``(part, positions, node[positions])`` for every part with nodes."""
    return shares_by_part(node, order, counts)
