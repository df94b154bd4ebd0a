"""Movie genres on IMDB with learned director and actor embeddings on the partition servers, DDP.

    PYTHONPATH=examples pyg-dist partition imdb_embedding:graph parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_emb_imdb_dist.py --seed 0

``train_emb_imdb_local.py`` with its two ``nn.Embedding`` tables swapped for
``pyg_dist.DistEmbedding`` (rows on the servers owning the directors and
actors, served as their ``x``: ``attr_name="x"``, so every
``DistNeighborLoader`` batch carries them with autograd) and
``torch.optim.SparseAdam`` for ``pyg_dist.optim.SparseAdam`` (applied on the
servers). The model is the same and DDP syncs it; each rank trains on its
share of every global batch and pushes its own embedding gradients, which
the servers all apply (docs/embeddings.md). Test accuracy is summed over the
ranks' shares; rank 0 prints ``test_acc=<float>`` last.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from imdb_embedding import LEARNED, build_model, correct_predictions, initial_rows, movie_loss
from torch.nn.parallel import DistributedDataParallel

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128, help="seed movies per step, all ranks")
    p.add_argument("--dim", type=int, default=64, help="values per learned row")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--emb-lr", type=float, default=0.01)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 10])
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(args.seed)
    data = pyg_dist.RemoteData()
    tables = []
    for i, node_type in enumerate(LEARNED):
        # One table per type shared by every rank (the first to ask a server
        # writes its rows), served as the type's ``x``; the seed in the name
        # keeps runs apart.
        num_nodes = data[node_type].num_nodes
        tables.append(pyg_dist.DistEmbedding(
            data, f"imdb_{node_type}_{args.seed}", args.dim, node_type=node_type,
            init=lambda ids, n=num_nodes, s=args.seed + i: initial_rows(n, args.dim, s)[ids],
            attr_name="x"))
    movie = data["movie"]
    train_loader = pyg_dist.DistNeighborLoader(
        data, num_neighbors=args.fanout, input_nodes=("movie", movie.train_mask),
        global_batch_size=args.batch_size, shuffle=True, seed=args.seed)
    test_loader = pyg_dist.DistNeighborLoader(
        data, num_neighbors=args.fanout, input_nodes=("movie", movie.test_mask),
        global_batch_size=args.batch_size, seed=args.seed + 1)
    model = build_model(data.metadata(), args.hidden, len(args.fanout))
    with torch.no_grad():  # lazy layers take their shapes from one batch
        batch = next(iter(test_loader))
        model(batch.x_dict, batch.edge_index_dict)
    if dist.is_initialized():
        # The last layer's weights of the other node types feed no loss.
        model = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    sparse = pyg_dist.optim.SparseAdam(tables, lr=args.emb_lr)
    steps = 0
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for batch in train_loader:
            optimizer.zero_grad()
            sparse.zero_grad()
            loss = movie_loss(model, batch)
            loss.backward()
            optimizer.step()
            sparse.step()
            total += loss.item()
            steps += 1
        if rank == 0:
            print(f"epoch={epoch} loss={total:.4f} steps={steps}", flush=True)
    sparse.flush()  # every step of this rank applied
    if dist.is_initialized():
        dist.barrier()  # and every other rank's
    counts = torch.tensor(correct_predictions(model, test_loader))
    if dist.is_initialized():  # every rank evaluated its share of the movies
        dist.all_reduce(counts)
    if rank == 0:
        print(f"test_acc={float(counts[0] / counts[1]):.4f}", flush=True)
    data.close()
    if dist.is_initialized():
        del model  # before the group goes: see train_sage_dist.py
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
