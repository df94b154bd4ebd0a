"""A request whose answer can never fit a server's reply budget is refused
at once with ``ReplyBudgetError`` naming the op, the bytes, the budget and
the setting, not as ``ServerBusyError``, which the retry layer asks again
until the deadline (it held a coordinator's worker for over 120 s)."""

from __future__ import annotations

import time

import pytest
import torch
from support.servers import serve_part

from pyg_dist.errors import ReplyBudgetError, ServerBusyError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.protocol.ops import OPS
from pyg_dist.rpc import RpcConfig
from pyg_dist.rpc.retrying import RetryingClient

BUDGET = 4 << 20
ARGS = ["--max-reply-bytes", str(1 << 20), "--client-reply-budget", str(BUDGET),
        "--server-reply-budget", str(BUDGET)]


@pytest.mark.timeout(180)
def test_an_answer_over_the_whole_budget_is_refused_at_once(cora2_root):
    part = PartitionReader(cora2_root).load_part(0)
    busiest = part.node_ids[part.indptr.diff().argmax()]
    # The busiest seed many times, one neighbour each without replacement:
    # a small answer, but a sort over every candidate (48 bytes each) that
    # needs more than the whole budget.
    seeds = busiest[None].repeat(20000)
    with serve_part(cora2_root, 0, serve_args=ARGS) as (_, endpoint), \
            RetryingClient([endpoint], RpcConfig(timeout=60), OPS) as client:
        start = time.monotonic()
        with pytest.raises(ReplyBudgetError) as info:
            client.call(0, "sample",
                        {"edge_types": [None], "num_neighbors": 1, "replace": False, "seed": 1},
                        [seeds])
        took = time.monotonic() - start
        # Still serving, and a request that fits is answered.
        reply = client.call(0, "sample",
                            {"edge_types": [None], "num_neighbors": 1, "replace": False, "seed": 1},
                            [seeds[:10]])
    assert not isinstance(info.value, ServerBusyError)
    text = str(info.value)
    assert "'sample'" in text and str(BUDGET) in text and "PYG_DIST_CLIENT_REPLY_BUDGET" in text
    # Refused once, not asked again until the 60 s deadline.
    assert took < 30, took
    assert reply.tensors[0].numel() == 10 and bool(torch.all(reply.tensors[0] <= 1))
