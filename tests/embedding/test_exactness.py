"""With one trainer, steps on a DistEmbedding equal torch's on
``nn.Embedding(sparse=True)`` over the same batches, to 1e-6: SGD,
SparseAdam and Adagrad, on 2 and 3 parts; and the gradient a DistEmbedding
records is the sparse gradient torch computes."""

from __future__ import annotations

import threading

import pytest
import torch
from embedding_support import serving

import pyg_dist
from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import EmbeddingError, RemoteError
from pyg_dist.store.connect import connect

DIM = 8


def _init(ids: torch.Tensor) -> torch.Tensor:
    """Rows as a function of the global ids alone (any partitioning)."""
    cols = torch.arange(DIM, dtype=torch.float32)
    return torch.sin(ids.to(torch.float32).view(-1, 1) * 0.37 + cols)


def _batches(num_nodes: int, steps: int = 6, size: int = 300) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    # Repeats within a batch, and batches that share rows.
    return [torch.randint(0, num_nodes // 3, (size,), generator=g) * 3 % num_nodes
            for _ in range(steps)]


def _loss(rows: torch.Tensor, step: int) -> torch.Tensor:
    target = torch.linspace(-1, 1, DIM) * (step + 1)
    return ((rows - target) ** 2).sum(1).mean() + rows.pow(3).mean()


OPTIMISERS = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.3), lambda e: pyg_dist.optim.SGD(e, lr=0.3)),
    "adam": (lambda p: torch.optim.SparseAdam(p, lr=0.05, betas=(0.8, 0.95), eps=1e-6),
             lambda e: pyg_dist.optim.SparseAdam(e, lr=0.05, betas=(0.8, 0.95), eps=1e-6)),
    "adagrad": (lambda p: torch.optim.Adagrad(p, lr=0.2, lr_decay=0.01,
                                              initial_accumulator_value=0.1),
                lambda e: pyg_dist.optim.SparseAdagrad(e, lr=0.2, lr_decay=0.01,
                                                       initial_accumulator_value=0.1)),
}


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("kind", list(OPTIMISERS))
def test_steps_equal_torch_sparse_embedding(served, num_parts, kind):
    fs, gs = served[num_parts]
    num_nodes = fs.num_nodes
    local = torch.nn.Embedding(num_nodes, DIM, sparse=True)
    with torch.no_grad():
        local.weight.copy_(_init(torch.arange(num_nodes)))
    emb = DistEmbedding((fs, gs), f"exact-{kind}-{num_parts}", DIM, init=_init)
    make_local, make_dist = OPTIMISERS[kind]
    local_opt, dist_opt = make_local(local.parameters()), make_dist([emb])
    assert torch.equal(emb.read(torch.arange(num_nodes)), local.weight.detach())
    for step, ids in enumerate(_batches(num_nodes)):
        local_opt.zero_grad()
        dist_opt.zero_grad()
        _loss(local(ids), step).backward()
        _loss(emb(ids), step).backward()
        # The recorded gradient is torch's sparse one, row for row.
        expected = local.weight.grad.coalesce()
        got = emb.grad
        assert torch.equal(got.indices(), expected.indices())
        torch.testing.assert_close(got.values(), expected.values(), rtol=0, atol=1e-6)
        local_opt.step()
        dist_opt.step()
    weights = emb.read(torch.arange(num_nodes))
    torch.testing.assert_close(weights, local.weight.detach(), rtol=0, atol=1e-6)
    assert dist_opt.state_dict()["steps"] == {emb.name: 6}


def test_rows_come_back_in_the_order_asked_with_repeats(served):
    fs, gs = served[3]
    emb = DistEmbedding((fs, gs), "order", DIM, init=_init)
    ids = torch.tensor([5, 2700, 5, 0, 1353, 2700, 7])
    rows = emb(ids)
    assert torch.equal(rows.detach(), _init(ids))
    rows.sum().backward()
    grad = emb.grad
    assert grad.indices().tolist() == [[0, 5, 7, 1353, 2700]]
    assert grad.values()[:, 0].tolist() == [1.0, 2.0, 1.0, 1.0, 2.0]
    emb.zero_grad()
    assert emb.grad is None
    with torch.no_grad():
        emb(ids)
    assert emb.grad is None  # nothing recorded without autograd


def test_zeros_uniform_and_bfloat16(served):
    fs, gs = served[2]
    ids = torch.arange(fs.num_nodes)
    zeros = DistEmbedding((fs, gs), "zeros", 4, init="zeros")
    assert torch.equal(zeros.read(ids), torch.zeros(fs.num_nodes, 4))
    uniform = DistEmbedding((fs, gs), "uniform", 16, init="uniform", seed=3)
    rows = uniform.read(ids)
    assert rows.abs().max() <= 0.25 and rows.std() > 0.1  # U(-1/4, 1/4)
    half = DistEmbedding((fs, gs), "half", DIM, init=_init, dtype=torch.bfloat16)
    assert half.read(ids).dtype == torch.bfloat16
    assert torch.equal(half.read(ids), _init(ids).to(torch.bfloat16))
    opt = pyg_dist.optim.SGD([half], lr=0.5)
    half(torch.tensor([3, 4])).float().sum().backward()
    opt.step()
    after = half.read(torch.tensor([3, 4]))
    # float32 arithmetic on the stored (rounded) rows, rounded again.
    stored = _init(torch.tensor([3, 4])).to(torch.bfloat16).float()
    assert torch.equal(after, (stored - 0.5).to(torch.bfloat16))


def test_a_second_trainer_shares_the_table_and_a_clash_is_refused(served):
    fs, gs = served[2]
    first = DistEmbedding((fs, gs), "shared", DIM, init=_init)
    pyg_dist.optim.SGD([first], lr=1.0)
    second = DistEmbedding((fs, gs), "shared", DIM, init="zeros")  # found, not made again
    assert torch.equal(second.read(torch.arange(10)), _init(torch.arange(10)))
    with pytest.raises(EmbeddingError, match="exists on part"):
        DistEmbedding((fs, gs), "shared", DIM + 1)


def test_with_staleness_every_step_still_lands(served):
    # Reads may miss the last two steps' pushes, but none is lost: after a
    # flush the table is torch's (SGD's steps commute: the order of the
    # reads does not matter for a linear loss).
    fs, gs = served[2]
    emb = DistEmbedding((fs, gs), "stale", DIM, init=_init, staleness=2)
    opt = pyg_dist.optim.SGD([emb], lr=0.1)
    expected = _init(torch.arange(fs.num_nodes))
    for ids in _batches(fs.num_nodes, steps=5, size=50):
        opt.zero_grad()
        emb(ids).sum().backward()
        opt.step()
        expected.index_add_(0, ids, torch.full((ids.numel(), DIM), -0.1))
    opt.flush()
    torch.testing.assert_close(emb.read(torch.arange(fs.num_nodes)), expected, rtol=0,
                               atol=1e-6)
    with pytest.raises(EmbeddingError, match="staleness"):
        DistEmbedding((fs, gs), "stale", DIM, staleness=-1)


def test_ids_vouched_distinct_that_repeat_are_refused_by_their_server(served):
    fs, gs = served[2]
    emb = DistEmbedding((fs, gs), "vouched", DIM, init=_init)
    opt = pyg_dist.optim.SGD([emb], lr=0.1)
    emb(torch.tensor([4, 4, 9]), distinct=True).sum().backward()
    opt.step()
    with pytest.raises(RemoteError, match="names an id twice"):
        opt.flush()
    # Each server takes or refuses its own push whole: the owner of 4 refused
    # it (nothing applied there), the other applied its rows.
    rows = emb.read(torch.tensor([4, 9]))
    assert torch.equal(rows[0], _init(torch.tensor([4]))[0])
    owner = fs.router.book_of(None).part_of(torch.tensor([4, 9])).tolist()
    assert owner[0] != owner[1]
    torch.testing.assert_close(rows[1], _init(torch.tensor([9]))[0] - 0.1)


def test_every_thread_that_flushes_waits_for_a_push_in_flight(cora_roots):
    # A loader's two prefetch threads read (and flush) at once: neither may
    # go on before the push lands. The server's table lock, held here,
    # keeps the push from being applied.
    with serving(cora_roots[2], 2) as servers:
        fs, gs = connect([s.endpoint for s in servers])
        try:
            emb = DistEmbedding((fs, gs), "in-flight", DIM, init=_init)
            opt = pyg_dist.optim.SGD([emb], lr=0.1)
            locks = [s.ops.embeddings.tables["in-flight"].lock for s in servers]
            emb(torch.arange(20)).sum().backward()
            for lock in locks:
                lock.acquire()
            try:
                opt.step()
                flushers = [threading.Thread(target=emb.flush) for _ in range(2)]
                for thread in flushers:
                    thread.start()
                for thread in flushers:
                    thread.join(0.5)
                assert all(thread.is_alive() for thread in flushers)  # both wait
            finally:
                for lock in locks:
                    lock.release()
            for thread in flushers:
                thread.join(30)
                assert not thread.is_alive()
            torch.testing.assert_close(emb.read(torch.arange(20)),
                                       _init(torch.arange(20)) - 0.1, rtol=0, atol=1e-6)
        finally:
            fs.close()
