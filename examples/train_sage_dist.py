"""GraphSAGE on Cora with DistNeighborLoader over partition servers, DDP.

    pyg-dist partition pyg_dist.datasets:cora parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/train_sage_dist.py --seed 0
    pyg-dist launch parts/ --nproc 1 -- examples/train_sage_dist.py --device cuda  # nccl

On several hosts (docs/multi-node.md), each trainer host runs

    PYG_DIST_SERVERS=10.0.0.1:5555,10.0.0.2:5555 torchrun --nnodes 2 --node-rank K \
        --nproc-per-node 1 --rdzv-endpoint 10.0.0.3:29400 examples/train_sage_dist.py

The same script as ``train_sage_local.py`` except for two places: the graph
comes from the partition servers (``pyg_dist.RemoteData()`` reads their
addresses from ``PYG_DIST_SERVERS`` or the file ``PYG_DIST_SERVERS_FILE``;
the trainer needs no partition files), and the loader is
``DistNeighborLoader``, which splits the input nodes across the DDP ranks.
The process group has a bounded timeout (``--pg-timeout``), so that a rank
whose peer died exits with an error instead of waiting in a collective.
With ``--checkpoint`` it saves after every epoch and resumes from the file
(``torchrun --max-restarts``). Prints ``test_acc=<float>`` as its last line.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

import pyg_dist


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
    p.add_argument("--pg-timeout", type=float, default=120.0,
                   help="seconds a collective may wait for the other ranks")
    p.add_argument("--checkpoint", default=None,
                   help="file to save to after every epoch and resume from")
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


def load_checkpoint(path, model, optimizer, loader) -> int:
    """Restores model and optimiser from rank 0's ``path`` if it exists (the
    other ranks get the state from rank 0: no shared file system needed);
    returns the epoch to start at."""
    state = torch.load(path, map_location="cpu") \
        if path is not None and os.path.exists(path) else None
    if dist.is_initialized():
        shared = [state]
        dist.broadcast_object_list(shared, src=0)
        state = shared[0]
    if state is None:
        return 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    loader.set_epoch(state["epoch"])  # the shuffles a run without a restart would see
    print(f"resumed from {path} at epoch {state['epoch']}", flush=True)
    return state["epoch"]


def save_checkpoint(path, model, optimizer, epoch: int) -> None:
    """Rank 0 writes ``path`` atomically (a restart never reads half a file)."""
    if path is None or (dist.is_initialized() and dist.get_rank() != 0):
        return
    module = model.module if isinstance(model, DistributedDataParallel) else model
    torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch}, path + ".tmp")
    os.replace(path + ".tmp", path)


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or device.type == "cuda" \
            and "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=args.pg_timeout))
    torch.manual_seed(args.seed)

    data = pyg_dist.RemoteData()
    Loader = pyg_dist.DistNeighborLoader

    kwargs = dict(global_batch_size=args.batch_size)
    train_loader = Loader(data, num_neighbors=args.fanout, input_nodes=data.train_mask,
                          shuffle=True, **kwargs)
    test_loader = Loader(data, num_neighbors=[-1] * len(args.fanout),
                         input_nodes=data.test_mask, **kwargs)

    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(args.fanout),
                      out_channels=data.num_classes, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    start = load_checkpoint(args.checkpoint, model, optimizer, train_loader)
    if dist.is_initialized():
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    for epoch in range(start, args.epochs):
        loss = train_epoch(model, train_loader, optimizer, device)
        if epoch % 10 == 0 and (not dist.is_initialized() or dist.get_rank() == 0):
            print(f"epoch={epoch} loss={loss:.4f}", flush=True)
        save_checkpoint(args.checkpoint, model, optimizer, epoch + 1)
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
