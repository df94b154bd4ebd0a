"""Layer-wise inference: embeddings of every node, layer by layer, through the servers.

    pyg-dist partition pyg_dist.datasets:cora parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 -- examples/infer_layerwise_dist.py --check

Sampling ``L`` hops for every node of a big graph repeats most of the work:
layer-wise inference instead runs one layer over the whole graph at a time,
each node's full one-hop neighbourhood (``num_neighbors=[-1]``), and keeps the
layer's output for every node as the next layer's input. The first layer reads
the node features from the servers (``batch.x``); the next ones index the
previous layer's embeddings by the batch's global ids (``batch.n_id``), with
PyG's own ``BasicGNN.inference_per_layer``. (PyG's ``BasicGNN.inference``
itself wants an in-memory ``Data`` behind a ``NeighborLoader``.)

Under DDP every rank computes its share of the nodes (the loader's default
split, padded so that every rank has as many) and ``all_gather`` puts the
shares together, so every rank ends each layer with every node's embedding.
With ``split=False`` one rank could do it all alone instead. ``--check``
compares with a full-batch forward pass on the local Cora (``max_abs_diff=``);
``--out FILE`` saves the embeddings (rank 0).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.nn.models import GraphSAGE

import pyg_dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="seeds the (untrained) model")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--check", action="store_true",
                   help="compare with a full-batch pass on the local Cora")
    p.add_argument("--out", default=None, help="save the embeddings here (rank 0)")
    return p.parse_args()


def gather_rows(ids: Tensor, rows: Tensor, out: Tensor) -> None:
    """Writes every rank's ``rows`` into ``out`` at their global ``ids``."""
    if not dist.is_initialized():
        out[ids] = rows
        return
    # Every rank holds as many inputs (the split pads), so shapes match.
    all_ids = [torch.empty_like(ids) for _ in range(dist.get_world_size())]
    all_rows = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(all_ids, ids)
    dist.all_gather(all_rows, rows)
    out[torch.cat(all_ids)] = torch.cat(all_rows)


@torch.no_grad()
def layerwise(model: GraphSAGE, data, batch_size: int) -> Tensor:
    """Every node's output embedding, one layer at a time over the whole graph."""
    num_nodes = data[1].num_nodes
    loader = pyg_dist.DistNeighborLoader(data, num_neighbors=[-1], batch_size=batch_size)
    x_all = None
    for layer in range(model.num_layers):
        ids, rows = [], []
        for batch in loader:
            x = batch.x if x_all is None else x_all[batch.n_id]
            rows.append(model.inference_per_layer(layer, x, batch.edge_index,
                                                  batch.batch_size))
            ids.append(batch.n_id[:batch.batch_size])
        rows_t = torch.cat(rows)
        x_next = torch.zeros(num_nodes, rows_t.size(-1))
        gather_rows(torch.cat(ids), rows_t, x_next)
        x_all = x_next
    return x_all


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    torch.manual_seed(args.seed)
    data = pyg_dist.connect()
    in_channels = data[0][None, "x", torch.tensor([0])].size(-1)
    model = GraphSAGE(in_channels, args.hidden, num_layers=args.layers).eval()
    emb = layerwise(model, data, args.batch_size)
    if rank0:
        print(f"embeddings={emb.size(0)}x{emb.size(1)}", flush=True)
        if args.out:
            torch.save(emb, args.out)
        if args.check:
            from pyg_dist.datasets import cora

            local = cora()
            with torch.no_grad():
                full = model(local.x, local.edge_index)
            print(f"max_abs_diff={float((full - emb).abs().max()):.3g}", flush=True)
    data[0].close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
