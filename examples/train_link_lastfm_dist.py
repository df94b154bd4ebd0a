"""Artist recommendation on LastFM with DistLinkNeighborLoader over partition servers, DDP.

    PYTHONPATH=examples pyg-dist partition lastfm_link_split:train_graph parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_link_lastfm_dist.py --seed 0

``train_link_lastfm_local.py`` with the graph taken from the partition
servers (``pyg_dist.RemoteData()``, read like a ``HeteroData``; the served
graph is LastFM without its held-out listens) and PyG's ``LinkNeighborLoader``
/ ``NeighborLoader`` swapped for ``DistLinkNeighborLoader`` /
``DistNeighborLoader``. Training splits the listens across DDP ranks (the
loader's default); the embedding loaders give every rank every node
(``split=False``), so every rank computes the same figures and rank 0
prints them. The reference's description:

A ``to_hetero(GraphSAGE)`` encoder over users, artists, listens and
friendships and a dot-product decoder, trained on the ``(user, listens,
artist)`` links of the graph without its held-out 10%
(``lastfm_link_split.py``) with one random artist per positive as its
negative. Then every user and artist is embedded (a ``NeighborLoader`` over
each node type, same fan-out) and scored on the held-out listens: AUC against
one random artist per held-out listen (``test_auc``), and recall@20 over all
artists, those the user listens to in the training graph excluded
(``test_recall20``). ``train_link_lastfm_dist.py`` is this script with the
graph taken from partition servers and PyG's loaders swapped for pyg-dist's.
Prints ``test_auc=<float>`` and ``test_recall20=<float>`` as its last lines.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from cora_link_split import auc
from lastfm_link_split import LISTENS, held_out_links, recall_at_k
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import to_hetero
from torch_geometric.nn.models import GraphSAGE

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1024, help="global batch (all ranks)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--fanout", type=int, nargs="+", default=[5, 5])
    p.add_argument("--prefetch", type=int, default=2)
    return p.parse_args()


def scores(model, batch) -> torch.Tensor:
    """Dot products of the endpoints' embeddings: one logit per labelled link."""
    h = model(batch.x_dict, batch.edge_index_dict)
    user, artist = batch[LISTENS].edge_label_index
    return (h["user"][user] * h["artist"][artist]).sum(dim=-1)


def train_epoch(model, loader, optimizer) -> float:
    model.train()
    total = 0.0
    for batch in loader:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(scores(model, batch), batch[LISTENS].edge_label)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


@torch.no_grad()
def embed(model, loader, node_type: str, num_nodes: int, hidden: int) -> torch.Tensor:
    """Every node of ``node_type``'s embedding, from its sampled neighbourhood."""
    model.eval()
    out = torch.zeros(num_nodes, hidden)
    for batch in loader:
        size = batch[node_type].batch_size
        h = model(batch.x_dict, batch.edge_index_dict)[node_type][:size]
        out[batch[node_type].n_id[:size]] = h
    return out


def evaluate(user: torch.Tensor, artist: torch.Tensor, seed: int) -> tuple[float, float]:
    """AUC of the held-out listens against as many (user, random artist) pairs, recall@20."""
    test = held_out_links()
    fake = torch.randint(artist.size(0), (test.size(1),),
                         generator=torch.Generator().manual_seed(seed))
    pos = (user[test[0]] * artist[test[1]]).sum(dim=-1)
    neg = (user[test[0]] * artist[fake]).sum(dim=-1)
    label = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    return auc(torch.cat([pos, neg]), label), recall_at_k(user, artist, k=20)


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    torch.manual_seed(args.seed)
    data = pyg_dist.RemoteData()
    Loader, NodeLoader = pyg_dist.DistLinkNeighborLoader, pyg_dist.DistNeighborLoader

    train_loader = Loader(data, num_neighbors=args.fanout, edge_label_index=(LISTENS, None),
                          neg_sampling="binary", global_batch_size=args.batch_size,
                          shuffle=True, seed=args.seed, prefetch=args.prefetch)
    node_loaders = {t: NodeLoader(data, num_neighbors=args.fanout, input_nodes=t,
                                  batch_size=args.batch_size, split=False,
                                  seed=args.seed + 2, prefetch=args.prefetch)
                    for t in ("user", "artist")}

    sage = GraphSAGE(-1, args.hidden, num_layers=len(args.fanout), out_channels=args.hidden)
    model = to_hetero(sage, data.metadata(), aggr="sum")
    with torch.no_grad():  # lazy input sizes from one batch
        batch = next(iter(node_loaders["user"]))
        model(batch.x_dict, batch.edge_index_dict)
    if dist.is_initialized():
        # Not every relation's last-layer weights feed every batch's loss.
        model = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        loss = train_epoch(model, train_loader, optimizer)
        if rank0:
            print(f"epoch={epoch} loss={loss:.4f}", flush=True)
    user, artist = (embed(model, node_loaders[t], t, data[t].num_nodes, args.hidden)
                    for t in ("user", "artist"))
    result_auc, recall = evaluate(user, artist, args.seed + 1)
    if rank0:
        print(f"test_auc={result_auc:.4f}", flush=True)
        print(f"test_recall20={recall:.4f}", flush=True)
    data.close()
    if dist.is_initialized():
        del model  # before the group goes: see train_sage_dist.py
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
