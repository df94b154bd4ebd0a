"""Messages between the ranks of a cross-host partitioning run
(:mod:`~pyg_dist.partitioning.cross_host`), over ``torch.distributed``
collectives (gloo): byte strings to every rank (``all_to_all_single`` of
their sizes, then of their bytes), JSON and int64 arrays to all ranks
(``all_gather``), and agreements on one number. No pickle: ``torch.distributed``'s object
collectives would unpickle what a rank sends.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def agree_min(value: int) -> int:
    """The smallest ``value`` of all ranks (chunk sizes must agree)."""
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t)


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on some rank."""
    t = torch.tensor([int(flag)], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t)


def exchange(outgoing: list[list[Any]]) -> list[memoryview]:
    """Sends the buffers of ``outgoing[q]`` (bytes-like, C-contiguous), joined,
    to rank ``q``; returns what every rank sent here. The payload is copied
    once (joined) before it is sent."""
    world = dist.get_world_size()
    sizes = torch.tensor([sum(memoryview(b).nbytes for b in pieces) for pieces in outgoing],
                         dtype=torch.int64)
    got = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(got, sizes)
    payload = bytearray().join(b for pieces in outgoing for b in pieces)
    send = torch.frombuffer(payload, dtype=torch.uint8) if payload else \
        torch.empty(0, dtype=torch.uint8)
    recv = torch.empty(int(got.sum()), dtype=torch.uint8)
    dist.all_to_all_single(recv, send, output_split_sizes=got.tolist(),
                           input_split_sizes=sizes.tolist())
    del payload, send
    view, out, at = memoryview(recv.numpy()), [], 0
    for size in got.tolist():
        out.append(view[at:at + size])
        at += size
    return out


def gather_json(value: Any) -> list[Any]:
    """``value`` (JSON-safe) of every rank, in rank order."""
    blob = json.dumps(value).encode()
    size = torch.tensor([len(blob)], dtype=torch.int64)
    sizes = [torch.empty(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = max(int(s) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[:len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    got = [torch.empty(longest, dtype=torch.uint8) for _ in sizes]
    dist.all_gather(got, mine)
    return [json.loads(tensor[:int(n)].numpy().tobytes()) for tensor, n in zip(got, sizes)]


def gather_arrays(values: np.ndarray) -> list[np.ndarray]:
    """``values`` (1-D int64, any length) of every rank, in rank order
    (what a partitioner's :meth:`~pyg_dist.partitioning.file_source.EdgeStream.exchange`
    does across ranks)."""
    values = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    sizes = [torch.empty(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([values.size], dtype=torch.int64))
    longest = max(int(s) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.int64)
    mine[:values.size] = torch.from_numpy(values)
    got = [torch.empty(longest, dtype=torch.int64) for _ in sizes]
    dist.all_gather(got, mine)
    return [tensor[:int(n)].numpy() for tensor, n in zip(got, sizes)]
