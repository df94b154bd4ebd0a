"""Movie genres on IMDB with learned director and actor embeddings, in one process (the reference).

    PYTHONPATH=examples python examples/train_emb_imdb_local.py --seed 0

Directors and actors have no features here (``imdb_embedding.py``): each
has a row of a ``torch.nn.Embedding(sparse=True)`` (``torch.optim.SparseAdam``),
read for the sampled nodes of every ``NeighborLoader`` batch as their
``x``; the model is ``to_hetero(GraphSAGE)`` (``torch.optim.Adam``).
``train_emb_imdb_dist.py`` is this script with the tables on the partition
servers. Prints ``test_acc=<float>`` last.
"""

from __future__ import annotations

import argparse

import torch
from imdb_embedding import (
    LEARNED,
    build_model,
    correct_predictions,
    graph,
    initial_rows,
    movie_loss,
)
from torch_geometric.loader import NeighborLoader


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128, help="seed movies per step")
    p.add_argument("--dim", type=int, default=64, help="values per learned row")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--emb-lr", type=float, default=0.01)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 10])
    return p.parse_args()


def with_rows(batch, tables):
    """The batch with its directors' and actors' rows as their ``x``."""
    for node_type, table in tables.items():
        batch[node_type].x = table(batch[node_type].n_id)
    return batch


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    data = graph()
    tables = {}
    for i, node_type in enumerate(LEARNED):
        rows = initial_rows(data[node_type].num_nodes, args.dim, args.seed + i)
        tables[node_type] = torch.nn.Embedding.from_pretrained(rows, freeze=False, sparse=True)
    movie = data["movie"]
    train_loader = NeighborLoader(data, num_neighbors=args.fanout,
                                  input_nodes=("movie", movie.train_mask),
                                  batch_size=args.batch_size, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=args.fanout,
                                 input_nodes=("movie", movie.test_mask),
                                 batch_size=args.batch_size)
    model = build_model(data.metadata(), args.hidden, len(args.fanout))
    with torch.no_grad():  # lazy layers take their shapes from one batch
        batch = with_rows(next(iter(test_loader)), tables)
        model(batch.x_dict, batch.edge_index_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    sparse = torch.optim.SparseAdam([t.weight for t in tables.values()], lr=args.emb_lr)
    steps = 0
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for batch in train_loader:
            optimizer.zero_grad()
            sparse.zero_grad()
            loss = movie_loss(model, with_rows(batch, tables))
            loss.backward()
            optimizer.step()
            sparse.step()
            total += loss.item()
            steps += 1
        print(f"epoch={epoch} loss={total:.4f} steps={steps}", flush=True)
    torch.manual_seed(args.seed + 1)  # the test batches' neighbours
    correct, seen = correct_predictions(model, (with_rows(b, tables) for b in test_loader))
    print(f"test_acc={correct / seen:.4f}", flush=True)


if __name__ == "__main__":
    main()
