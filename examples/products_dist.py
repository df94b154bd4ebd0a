"""PyG's examples/ogbn_products_sage.py (3-layer GraphSAGE, layer-wise inference), twice.

    python examples/products_local.py --epochs 20
    PYTHONPATH=examples python -m offline_datasets products parts/ --num-parts 2
    pyg-dist launch parts/ --nproc 2 --quiet-ranks examples/products_dist.py --epochs 20

``products_local.py`` is PyG's script in one process, on a small offline
stand-in for ``PygNodePropPredDataset('ogbn-products')`` and OGB's
``Evaluator`` (``offline_datasets.py``), one run instead of ten, less its
``num_workers``. The partition step passes OGB's index splits and a transform
to ``pyg_dist.partition(data, ..., splits=dataset.get_idx_split(),
transform=T.ToUndirected())``, which stores the splits as masks.
``products_dist.py`` is the script ported to pyg-dist; this docstring is the
same in both, so ``diff -u`` shows the port and only it: ``init_trainer()``
joins torchrun's process group and gives the served graph as a dataset (its
``get_idx_split()`` reads the masks back); ``DistNeighborLoader`` stands in
for ``NeighborLoader`` and splits its inputs across the ranks;
``global_batch_size`` keeps the local script's optimiser steps;
``DDPModel`` is DDP that keeps ``model.inference``; and
``subgraph_loader.gather(xs)`` puts the ranks' shares of each layer together
in node order, so ``test()`` and OGB's evaluator are unchanged and each node
is computed once in the job. Prints ``test_acc=<float>`` last.
"""

import argparse

import torch
import torch.nn.functional as F
from offline_datasets import Evaluator
from torch_geometric.nn import SAGEConv
from tqdm import tqdm

from pyg_dist import DDPModel, DistNeighborLoader as NeighborLoader, init_trainer

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=20)
parser.add_argument('--seed', type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)

dataset = init_trainer()
split_idx = dataset.get_idx_split()
evaluator = Evaluator(name='ogbn-products')
data = dataset[0]

train_loader = NeighborLoader(
    data,
    input_nodes=split_idx['train'],
    num_neighbors=[15, 10, 5],
    global_batch_size=16,
    shuffle=True,
)
subgraph_loader = NeighborLoader(
    data,
    input_nodes=None,
    num_neighbors=[-1],
    batch_size=256,
)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers):
        super().__init__()

        self.num_layers = num_layers

        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
                x = F.dropout(x, p=0.5, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all):
        pbar = tqdm(total=len(subgraph_loader.dataset) * self.num_layers)
        pbar.set_description('Evaluating')

        # Compute representations of nodes layer by layer, using *all*
        # available edges. This leads to faster computation in contrast to
        # immediately computing the final representations of each batch.
        for i in range(self.num_layers):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.n_id.to(x_all.device)].to(device)
                x = self.convs[i](x, batch.edge_index.to(device))
                if i < self.num_layers - 1:
                    x = x.relu()
                xs.append(x[:batch.batch_size].cpu())
                pbar.update(batch.batch_size)
            x_all = subgraph_loader.gather(xs)

        pbar.close()

        return x_all


device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
model = DDPModel(SAGE(dataset.num_features, 256, dataset.num_classes, num_layers=3).to(device))

x = data.x.to(device)
y = data.y.squeeze().to(device)


def train(epoch):
    model.train()

    pbar = tqdm(total=len(train_loader.dataset))
    pbar.set_description(f'Epoch {epoch:02d}')

    total_loss = total_correct = 0
    for batch in train_loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index.to(device))[:batch.batch_size]
        y = batch.y[:batch.batch_size].squeeze()
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()

        total_loss += float(loss)
        total_correct += int(out.argmax(dim=-1).eq(y).sum())
        pbar.update(batch.batch_size)

    pbar.close()

    loss = total_loss / len(train_loader)
    approx_acc = total_correct / len(train_loader.dataset)

    return loss, approx_acc


@torch.no_grad()
def test():
    model.eval()

    out = model.inference(x)

    y_true = y.cpu().unsqueeze(-1)
    y_pred = out.argmax(dim=-1, keepdim=True)

    train_acc = evaluator.eval({
        'y_true': y_true[split_idx['train']],
        'y_pred': y_pred[split_idx['train']],
    })['acc']
    val_acc = evaluator.eval({
        'y_true': y_true[split_idx['valid']],
        'y_pred': y_pred[split_idx['valid']],
    })['acc']
    test_acc = evaluator.eval({
        'y_true': y_true[split_idx['test']],
        'y_pred': y_pred[split_idx['test']],
    })['acc']

    return train_acc, val_acc, test_acc


optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
for epoch in range(1, args.epochs + 1):
    loss, acc = train(epoch)
    print(f'Epoch {epoch:02d}, Loss: {loss:.4f}, Approx. Train: {acc:.4f}')
train_acc, val_acc, test_acc = test()
print(f'Train: {train_acc:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}')
print(f'test_acc={test_acc:.4f}')
