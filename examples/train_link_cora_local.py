"""Link prediction on Cora with PyG's LinkNeighborLoader, in one process (the reference).

    python examples/train_link_cora_local.py --seed 0

A GraphSAGE encoder and a dot-product decoder, trained on the links of the
graph without its held-out 10% (``cora_link_split.py``) with one random
negative per positive, scored by AUC on the held-out links against as many
negatives. ``train_link_cora_dist.py`` is this script with the graph taken
from partition servers and ``LinkNeighborLoader`` swapped for
``DistLinkNeighborLoader``. Prints ``test_auc=<float>`` as its last line.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from cora_link_split import auc, split
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn.models import GraphSAGE


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    return p.parse_args()


def scores(model, batch) -> torch.Tensor:
    """Dot products of the endpoints' embeddings: one logit per labelled link."""
    h = model(batch.x, batch.edge_index)
    src, dst = batch.edge_label_index
    return (h[src] * h[dst]).sum(dim=-1)


def train_epoch(model, loader, optimizer) -> float:
    model.train()
    total = 0.0
    for batch in loader:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(scores(model, batch), batch.edge_label)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


@torch.no_grad()
def test_auc(model, loader) -> float:
    model.eval()
    out, labels = [], []
    for batch in loader:
        out.append(scores(model, batch))
        labels.append(batch.edge_label)
    return auc(torch.cat(out), torch.cat(labels))


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    data, test_links = split()
    Loader = LinkNeighborLoader

    train_loader = Loader(data, num_neighbors=args.fanout, edge_label_index=data.edge_index,
                          neg_sampling="binary", batch_size=args.batch_size, shuffle=True)
    test_loader = Loader(data, num_neighbors=[-1] * len(args.fanout),
                         edge_label_index=test_links, neg_sampling="binary",
                         batch_size=args.batch_size)

    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(args.fanout),
                      out_channels=args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        loss = train_epoch(model, train_loader, optimizer)
        print(f"epoch={epoch} loss={loss:.4f}", flush=True)
    torch.manual_seed(args.seed + 1)  # fixes the test negatives
    print(f"test_auc={test_auc(model, test_loader):.4f}", flush=True)


if __name__ == "__main__":
    main()
