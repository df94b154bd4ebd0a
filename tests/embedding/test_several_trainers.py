"""Several trainers share a table: the servers apply every push, each
whole, in the order they arrive (asynchronous per row), so a row that all of
them update moves by all of their steps, none lost or merged."""

from __future__ import annotations

import threading

import torch

import pyg_dist
from pyg_dist.embedding import DistEmbedding
from pyg_dist.store.connect import connect

DIM = 4
STEPS = 20


def test_every_trainers_steps_are_applied(served):
    endpoints = served[3][0].router.endpoints
    trainers = [connect(endpoints) for _ in range(3)]
    ids = torch.tensor([0, 7, 1000, 2707])  # rows every trainer updates, on several parts
    try:
        tables = [DistEmbedding(stores, "shared-sgd", DIM, init="zeros") for stores in trainers]
        failures: list[BaseException] = []

        def train(emb: DistEmbedding, lr: float) -> None:
            try:
                opt = pyg_dist.optim.SGD([emb], lr=lr)
                for _ in range(STEPS):
                    opt.zero_grad()
                    emb(ids).sum().backward()  # gradient 1 per row
                    opt.step()
                opt.flush()
            except BaseException as exc:  # reported by the test thread
                failures.append(exc)

        threads = [threading.Thread(target=train, args=(emb, lr))
                   for emb, lr in zip(tables, (1.0, 2.0, 4.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not failures and not any(t.is_alive() for t in threads)
        # SGD's steps commute: every one of the 60 is in, whatever the order.
        assert torch.equal(tables[0].read(ids), torch.full((4, DIM), -STEPS * 7.0))
    finally:
        for fs, _ in trainers:
            fs.close()
