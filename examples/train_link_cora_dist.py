"""Link prediction on Cora with DistLinkNeighborLoader over partition servers, DDP.

    PYTHONPATH=examples pyg-dist partition cora_link_split:train_graph parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_link_cora_dist.py --seed 0

``train_link_cora_local.py`` with the graph taken from the partition servers
(``pyg_dist.connect()``; the served graph is Cora without its held-out links)
and ``LinkNeighborLoader`` swapped for ``DistLinkNeighborLoader``. Training
splits the links across DDP ranks (the loader's default); the held-out links
are few, so every rank scores all of them (``split=False``) and computes the
same AUC, which rank 0 prints as ``test_auc=<float>`` (its last line). For a
big evaluation set, keep the split and gather the scores instead (see
docs/loader.md, "Evaluation under DDP").
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from cora_link_split import auc, held_out_links
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256, help="global batch (all ranks)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    p.add_argument("--prefetch", type=int, default=2)
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
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    torch.manual_seed(args.seed)
    data = pyg_dist.connect()
    Loader = pyg_dist.DistLinkNeighborLoader

    train_loader = Loader(data, num_neighbors=args.fanout, edge_label_index=None,
                          neg_sampling="binary", global_batch_size=args.batch_size,
                          shuffle=True, seed=args.seed, prefetch=args.prefetch)
    test_loader = Loader(data, num_neighbors=[-1] * len(args.fanout),
                         edge_label_index=held_out_links(), neg_sampling="binary",
                         batch_size=args.batch_size, split=False, seed=args.seed + 1)

    model = GraphSAGE(data[0].get_tensor_size(None, "x")[-1], args.hidden,
                      num_layers=len(args.fanout), out_channels=args.hidden)
    if dist.is_initialized():
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        loss = train_epoch(model, train_loader, optimizer)
        if rank0:
            print(f"epoch={epoch} loss={loss:.4f}", flush=True)
    result = test_auc(model, test_loader)
    if rank0:
        print(f"test_auc={result:.4f}", flush=True)
    data[0].close()
    if dist.is_initialized():
        # As in train_sage_dist.py: the DDP model goes before the group
        # (pytorch/pytorch#56297).
        del model
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
