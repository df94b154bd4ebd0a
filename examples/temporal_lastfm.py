"""Temporal link prediction on LastFM: train on the past, evaluate on the future.

    python examples/temporal_lastfm.py                       # all 186,479 tag events
    python examples/temporal_lastfm.py --max-events 3000 --epochs 1   # a quick run

LastFM (from the ``graphdatascience`` wheel, :func:`pyg_dist.datasets.lastfm`)
is a graph of users and artists whose edges are timestamped tag events (a user
tagged an artist, milliseconds), weighted by how much the user played the
artist. The script partitions it, serves the parts (one ``pyg-dist serve``
process each, on loopback) and trains a GraphSAGE link predictor through
``DistNeighborLoader`` with ``time_attr="edge_time"`` and
``weight_attr="edge_weight"``: every event ``(user, artist, t)`` is a
positive pair, a random artist the negative, and all three seeds are
sampled at ``input_time = t - 1``, so no edge of the event's own time or
later, neither the event itself nor anything after it, reaches the model.
Training uses the earliest ``--train-fraction`` of the events, evaluation the
rest (the future). Prints ``test_auc=<float>`` as its last line.
"""

from __future__ import annotations

import argparse
import logging
import tempfile

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.models import GraphSAGE

import pyg_dist
from pyg_dist.cluster import LocalCluster
from pyg_dist.datasets import lastfm, lastfm_events


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-events", type=int, default=0, help="earliest events kept (0: all)")
    p.add_argument("--train-fraction", type=float, default=0.8)
    p.add_argument("--train-events", type=int, default=20000,
                   help="training events drawn per epoch (0: all of them)")
    p.add_argument("--test-events", type=int, default=5000, help="future events evaluated")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256, help="events per batch")
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    p.add_argument("--num-parts", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class LinkModel(torch.nn.Module):
    """A learned embedding per node, GraphSAGE over the sampled past, dot scores."""

    def __init__(self, num_nodes: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(num_nodes, hidden)
        self.gnn = GraphSAGE(hidden + 2, hidden, num_layers=num_layers)

    def forward(self, batch) -> tuple[Tensor, Tensor]:
        h = torch.cat([self.embedding(batch.n_id), batch.x], dim=-1)
        h = self.gnn(h, batch.edge_index)[:batch.batch_size]
        user, positive, negative = h.chunk(3)
        return (user * positive).sum(-1), (user * negative).sum(-1)


def event_loader(data, events: tuple[Tensor, Tensor, Tensor], args, *, shuffle_seed: int,
                 artists: tuple[int, int]):
    """One batch per ``batch_size`` events: seeds ``[users, artists, negatives]``,
    all at the event's time minus one."""
    user, artist, time = events
    gen = torch.Generator().manual_seed(shuffle_seed)
    order = torch.randperm(user.numel(), generator=gen)
    negative = torch.randint(*artists, (user.numel(),), generator=gen)
    seeds, times = [], []
    for chunk in order.split(args.batch_size):
        seeds += [user[chunk], artist[chunk], negative[chunk]]
        times += [time[chunk] - 1] * 3
    return pyg_dist.DistNeighborLoader(
        data, num_neighbors=args.fanout, input_nodes=torch.cat(seeds),
        input_time=torch.cat(times), time_attr="edge_time", weight_attr="edge_weight",
        batch_size=3 * args.batch_size, shuffle=False, seed=shuffle_seed, prefetch=2)


def auc(positive: Tensor, negative: Tensor) -> float:
    """Probability that a positive pair outscores a negative one (ties count half)."""
    scores = torch.cat([positive, negative])
    ranks = torch.empty_like(scores)
    order = scores.argsort()
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=scores.dtype)
    # Average ranks over ties.
    unique, inverse = torch.unique(scores, return_inverse=True)
    mean_rank = torch.zeros_like(unique).index_add_(0, inverse, ranks) / \
        torch.bincount(inverse, minlength=unique.numel())
    ranks = mean_rank[inverse]
    n_pos, n_neg = positive.numel(), negative.numel()
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def train(data, model, events, args, epoch: int, artists) -> float:
    user, artist, time = events
    if args.train_events and user.numel() > args.train_events:
        pick = torch.randperm(user.numel(), generator=torch.Generator().manual_seed(epoch))
        events = tuple(t[pick[:args.train_events]] for t in events)
    optimizer = model.optimizer
    model.train()
    total, count = 0.0, 0
    for batch in event_loader(data, events, args, shuffle_seed=epoch + 1, artists=artists):
        optimizer.zero_grad()
        pos, neg = model(batch)
        loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos)) + \
            F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg))
        loss.backward()
        optimizer.step()
        total, count = total + loss.item() * pos.numel(), count + pos.numel()
    return total / max(count, 1)


@torch.no_grad()
def evaluate(data, model, events, args, artists) -> float:
    model.eval()
    positives, negatives = [], []
    for batch in event_loader(data, events, args, shuffle_seed=10_000, artists=artists):
        pos, neg = model(batch)
        positives.append(pos)
        negatives.append(neg)
    return auc(torch.cat(positives), torch.cat(negatives))


def main(argv=None) -> float:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(args.seed)
    graph = lastfm(args.max_events)
    user, artist, time = lastfm_events(graph)
    num_users = int(graph.x[:, 0].sum())
    artists = (num_users, graph.num_nodes)
    split = int(args.train_fraction * user.numel())
    past = (user[:split], artist[:split], time[:split])
    future = tuple(t[split:split + args.test_events] if args.test_events else t[split:]
                   for t in (user, artist, time))
    print(f"events={user.numel()} train={split} test={future[0].numel()} "
          f"split_time_ms={int(time[split])}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lastfm-") as root:
        pyg_dist.partition(graph, args.num_parts, root)
        with LocalCluster(root, startup_timeout=120.0) as cluster:
            data = pyg_dist.connect(cluster.endpoints)
            try:
                model = LinkModel(graph.num_nodes, args.hidden, len(args.fanout))
                model.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
                for epoch in range(args.epochs):
                    loss = train(data, model, past, args, epoch, artists)
                    print(f"epoch={epoch} loss={loss:.4f}", flush=True)
                score = evaluate(data, model, future, args, artists)
            finally:
                data[0].close()
    print(f"test_auc={score:.4f}", flush=True)
    return score


if __name__ == "__main__":
    main()
