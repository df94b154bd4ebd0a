"""The servers' sparse optimiser steps (``apply_update``) in chunks equal
torch's optimisers on the whole sparse gradient, and the distinctness check
a push and a batch's ids go through answers both ways."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.kernels.distinct import MASK_RANGE_PER_ID, all_distinct
from pyg_dist.server.embedding_updates import Optimizer, apply_update, new_state

ROWS, DIM = 500, 6

TORCH = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.3), {"kind": "sgd", "lr": 0.3}),
    "adam": (lambda p: torch.optim.SparseAdam(p, lr=0.05, betas=(0.8, 0.95), eps=1e-6),
             {"kind": "adam", "lr": 0.05, "betas": [0.8, 0.95], "eps": 1e-6}),
    "adagrad": (lambda p: torch.optim.Adagrad(p, lr=0.2, lr_decay=0.01,
                                              initial_accumulator_value=0.1),
                {"kind": "adagrad", "lr": 0.2, "lr_decay": 0.01,
                 "initial_accumulator_value": 0.1}),
}


@pytest.mark.parametrize("kind", list(TORCH))
@pytest.mark.parametrize("chunk_bytes", [4 * DIM, 4 * DIM * 7, 1 << 20])
def test_chunked_steps_equal_torch(kind, chunk_bytes):
    g = torch.Generator().manual_seed(3)
    start = torch.randn(ROWS, DIM, generator=g)
    param = torch.nn.Parameter(start.clone())
    make_torch, spec = TORCH[kind]
    torch_opt = make_torch([param])
    weight, state = start.clone(), {}
    for step in range(1, 5):
        rows = torch.randperm(ROWS, generator=g)[:200]  # unique, unsorted
        grads = torch.randn(200, DIM, generator=g)
        param.grad = torch.sparse_coo_tensor(rows.view(1, -1), grads, (ROWS, DIM))
        torch_opt.step()
        opt = Optimizer.from_args({**spec, "step": step})
        state = state or new_state(opt, ROWS, DIM)
        apply_update(weight, state, rows, grads, opt, chunk_bytes=chunk_bytes)
    torch.testing.assert_close(weight, param.detach(), rtol=0, atol=1e-6)


def test_a_bfloat16_table_is_updated_in_float32_and_rounded():
    weight = torch.randn(ROWS, DIM).to(torch.bfloat16)
    rows, grads = torch.tensor([5, 1, 300]), torch.randn(3, DIM)
    expected = weight.clone()
    expected[rows] = (weight[rows].float() - 0.1 * grads).to(torch.bfloat16)
    apply_update(weight, {}, rows, grads, Optimizer.from_args({"kind": "sgd", "lr": 0.1}),
                 chunk_bytes=4 * DIM)
    assert torch.equal(weight, expected)


@pytest.mark.parametrize("bound", [10, MASK_RANGE_PER_ID * 10 + 1])  # mask, then sort
def test_all_distinct_answers_both_ways(bound):
    ids = torch.randperm(bound)[:10]
    assert all_distinct(ids, bound)
    assert not all_distinct(torch.cat([ids, ids[3:4]]), bound)
    assert all_distinct(ids[:1], bound) and all_distinct(ids[:0], bound)
