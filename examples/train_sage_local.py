"""GraphSAGE on Cora with PyG's NeighborLoader, in one process (the reference).

    python examples/train_sage_local.py --seed 0
    python examples/train_sage_local.py --device cuda

``train_sage_dist.py`` is this script with the graph taken from partition
servers (``pyg_dist.connect()``) and ``NeighborLoader`` swapped for
``DistNeighborLoader``; everything else, DDP included, is the same code.
Prints ``test_acc=<float>`` as its last line.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn.models import GraphSAGE

from pyg_dist.datasets import cora


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=70, help="global batch (all ranks)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 10])
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda: train on this rank's GPU, DDP over nccl")
    return p.parse_args()


def train_epoch(model, loader, optimizer, device) -> float:
    model.train()
    total = 0.0
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


@torch.no_grad()
def accuracy(model, loader, device) -> float:
    model.eval()
    counts = torch.zeros(2, device=device)  # nccl reduces GPU tensors only
    for batch in loader:
        batch = batch.to(device)
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
        counts += torch.tensor([float((pred == batch.y[:batch.batch_size]).sum()),
                                float(batch.batch_size)], device=device)
    if dist.is_initialized():  # every rank evaluated its share of the nodes
        dist.all_reduce(counts)
    return float(counts[0] / counts[1])


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or device.type == "cuda" \
            and "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(args.seed)

    data = cora()
    masks = {name: data[name] for name in ("train_mask", "test_mask")}
    Loader = NeighborLoader

    kwargs = dict(batch_size=args.batch_size // world_size)
    train_loader = Loader(data, num_neighbors=args.fanout, input_nodes=masks["train_mask"],
                          shuffle=True, **kwargs)
    test_loader = Loader(data, num_neighbors=[-1] * len(args.fanout),
                         input_nodes=masks["test_mask"], **kwargs)

    model = GraphSAGE(1433, args.hidden, num_layers=len(args.fanout), out_channels=7,
                      dropout=0.5).to(device)
    if dist.is_initialized():
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        loss = train_epoch(model, train_loader, optimizer, device)
        if epoch % 10 == 0 and (not dist.is_initialized() or dist.get_rank() == 0):
            print(f"epoch={epoch} loss={loss:.4f}", flush=True)
    acc = accuracy(model, test_loader, device)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"test_acc={acc:.4f}", flush=True)
    if dist.is_initialized():
        # DDP's reducer holds the process group; collected with the GIL held
        # (when main() returns), it would free the group by joining gloo's
        # threads while one of them, still releasing the tensors of the last
        # collective, waits for the GIL: both wait forever (seen in CI;
        # pytorch/pytorch#56297). So the DDP model goes first, while the
        # group is still registered; destroy_process_group() then frees the
        # group with the GIL released.
        del model
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
