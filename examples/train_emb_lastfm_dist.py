"""Artist recommendation on LastFM with learned embeddings served by the partition servers.

    PYTHONPATH=examples pyg-dist partition lastfm_link_split:train_graph parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_emb_lastfm_dist.py --seed 0

``train_emb_lastfm_local.py`` with its two ``nn.Embedding`` tables swapped
for ``pyg_dist.DistEmbedding`` (rows on the servers owning the users and
artists) and ``torch.optim.SparseAdam`` for ``pyg_dist.optim.SparseAdam``
(applied on the servers). Each rank trains on its share of every global
batch (the same steps as the reference); its pushes go to the servers,
which apply every rank's (docs/embeddings.md). Rank 0 then reads both
tables and prints ``test_auc=<float>`` last.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from lastfm_embedding import NUM_ARTISTS, NUM_USERS, batches, initial_rows, loss_of, test_auc

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=2048, help="links per step, all ranks")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.02)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    fs, gs = pyg_dist.connect()
    # One table per node type, shared by every rank (the first to ask a
    # server writes its rows); the seed in the name keeps runs apart.
    user = pyg_dist.DistEmbedding(
        (fs, gs), f"lastfm_user_{args.seed}", args.dim, node_type="user",
        init=lambda ids: initial_rows(NUM_USERS, args.dim, args.seed)[ids])
    artist = pyg_dist.DistEmbedding(
        (fs, gs), f"lastfm_artist_{args.seed}", args.dim, node_type="artist",
        init=lambda ids: initial_rows(NUM_ARTISTS, args.dim, args.seed + 1)[ids])
    opt = pyg_dist.optim.SparseAdam([user, artist], lr=args.lr)
    steps = 0
    for epoch in range(args.epochs):
        total = 0.0
        for users, artists, labels in batches(epoch, args.batch_size, args.seed, rank,
                                              world_size):
            opt.zero_grad()
            loss = loss_of(user(users), artist(artists), labels)
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        if rank == 0:
            print(f"epoch={epoch} loss={total:.4f} steps={steps}", flush=True)
    opt.flush()  # every step of this rank applied
    if dist.is_initialized():
        dist.barrier()  # and every other rank's
    if rank == 0:
        result = test_auc(user.read(torch.arange(NUM_USERS)),
                          artist.read(torch.arange(NUM_ARTISTS)), args.seed + 7)
        print(f"test_auc={result:.4f}", flush=True)
    fs.close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
