"""Artist recommendation on LastFM with learned embeddings only, in one process (the reference).

    PYTHONPATH=examples python examples/train_emb_lastfm_local.py --seed 0

A ``torch.nn.Embedding(sparse=True)`` per node type with
``torch.optim.SparseAdam``, trained on the training graph's listens
(``lastfm_embedding.py``). ``train_emb_lastfm_dist.py`` is this script with
the tables on the partition servers. Prints ``test_auc=<float>`` last.
"""

from __future__ import annotations

import argparse

import torch
from lastfm_embedding import (
    NUM_ARTISTS,
    NUM_USERS,
    batches,
    initial_rows,
    loss_of,
    test_auc,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=2048, help="links per step")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.02)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    user = torch.nn.Embedding(NUM_USERS, args.dim, sparse=True)
    artist = torch.nn.Embedding(NUM_ARTISTS, args.dim, sparse=True)
    with torch.no_grad():
        user.weight.copy_(initial_rows(NUM_USERS, args.dim, args.seed))
        artist.weight.copy_(initial_rows(NUM_ARTISTS, args.dim, args.seed + 1))
    opt = torch.optim.SparseAdam([user.weight, artist.weight], lr=args.lr)
    steps = 0
    for epoch in range(args.epochs):
        total = 0.0
        for users, artists, labels in batches(epoch, args.batch_size, args.seed):
            opt.zero_grad()
            loss = loss_of(user(users), artist(artists), labels)
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        print(f"epoch={epoch} loss={total:.4f} steps={steps}", flush=True)
    print(f"test_auc={test_auc(user.weight.detach(), artist.weight.detach(), args.seed + 7):.4f}",
          flush=True)


if __name__ == "__main__":
    main()
