"""Movie genres on IMDB with DistNeighborLoader over partition servers, DDP.

    pyg-dist partition pyg_dist.datasets:imdb parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_hetero_imdb_dist.py --model sage
    pyg-dist launch parts/ --nproc 2 -- examples/train_hetero_imdb_dist.py --model hgt

``train_hetero_imdb_local.py`` with the graph taken from the partition
servers (``pyg_dist.RemoteData()``, read like a ``HeteroData``:
``data["movie"].train_mask``, ``data.metadata()``) and ``NeighborLoader``
swapped for ``DistNeighborLoader``, which splits the input movies across the
DDP ranks; test accuracy is summed over the ranks' shares. Prints
``test_acc=<float>`` (rank 0) as its last line.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import HGTConv, Linear, to_hetero
from torch_geometric.nn.models import GraphSAGE

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["sage", "hgt"], default="sage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128, help="global batch (all ranks)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 10])
    return p.parse_args()


class HGT(torch.nn.Module):
    """Per-type input projections, ``HGTConv`` layers, a movie classifier."""

    def __init__(self, metadata, hidden: int, out_channels: int, num_layers: int) -> None:
        super().__init__()
        self.lin = torch.nn.ModuleDict({t: Linear(-1, hidden) for t in metadata[0]})
        self.convs = torch.nn.ModuleList(
            [HGTConv(hidden, hidden, metadata, heads=2) for _ in range(num_layers)])
        self.out = Linear(hidden, out_channels)

    def forward(self, x_dict, edge_index_dict):
        x_dict = {t: self.lin[t](x).relu() for t, x in x_dict.items()}
        for conv in self.convs:
            x_dict = conv(x_dict, edge_index_dict)
        return {"movie": self.out(x_dict["movie"])}


def build_model(name: str, metadata, hidden: int, num_layers: int) -> torch.nn.Module:
    if name == "hgt":
        return HGT(metadata, hidden, 3, num_layers)
    sage = GraphSAGE(-1, hidden, num_layers=num_layers, out_channels=3, dropout=0.5)
    return to_hetero(sage, metadata, aggr="sum")


def train_epoch(model, loader, optimizer) -> float:
    model.train()
    total = 0.0
    for batch in loader:
        optimizer.zero_grad()
        size = batch["movie"].batch_size
        out = model(batch.x_dict, batch.edge_index_dict)["movie"][:size]
        loss = F.cross_entropy(out, batch["movie"].y[:size])
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


@torch.no_grad()
def accuracy(model, loader) -> tuple[float, float]:
    """Correct predictions and seeds seen."""
    model.eval()
    correct = seen = 0.0
    for batch in loader:
        size = batch["movie"].batch_size
        pred = model(batch.x_dict, batch.edge_index_dict)["movie"][:size].argmax(dim=-1)
        correct += float((pred == batch["movie"].y[:size]).sum())
        seen += size
    return correct, seen


def initialise(model, loader) -> None:
    """Lazy layers (``-1`` input sizes) take their shapes from one batch."""
    batch = next(iter(loader))
    with torch.no_grad():
        model(batch.x_dict, batch.edge_index_dict)


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)

    data = pyg_dist.RemoteData()
    Loader = pyg_dist.DistNeighborLoader

    movie = data["movie"]
    train_loader = Loader(data, num_neighbors=args.fanout,
                          input_nodes=("movie", movie.train_mask),
                          global_batch_size=args.batch_size, shuffle=True, seed=args.seed)
    test_loader = Loader(data, num_neighbors=args.fanout, input_nodes=("movie", movie.test_mask),
                         global_batch_size=args.batch_size, seed=args.seed + 1)

    model = build_model(args.model, data.metadata(), args.hidden, len(args.fanout))
    initialise(model, test_loader)
    if dist.is_initialized():
        # The last layer's weights of the other node types feed no loss.
        model = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        loss = train_epoch(model, train_loader, optimizer)
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(f"epoch={epoch} loss={loss:.4f}", flush=True)
    counts = torch.tensor(accuracy(model, test_loader))
    if dist.is_initialized():  # every rank evaluated its share of the movies
        dist.all_reduce(counts)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"test_acc={float(counts[0] / counts[1]):.4f}", flush=True)
    if dist.is_initialized():
        del model  # before the group goes: see train_sage_dist.py
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
