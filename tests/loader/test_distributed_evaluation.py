"""Evaluation split across ranks, reduced for the user, equal to local evaluation.

Two real trainer processes in a gloo process group (a ``FileStore``: no
port to pick) over served Cora: layer-wise inference through
``loader.gather`` and mini-batch metrics through ``DistMetric`` give, on
every rank, what one process computes over the whole graph (to 1e-6),
while each rank iterates only its share of the inputs (``len(loader.dataset)``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from pyg_dist.errors import LoaderError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.loader.evaluation import DistMetric, recall_at_k, roc_auc

WORKER = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from torch_geometric.nn.models import GraphSAGE
    import pyg_dist

    rank, world, store, endpoints, result = sys.argv[1:]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    data = pyg_dist.RemoteData(endpoints.split(","))
    torch.manual_seed(0)
    model = pyg_dist.DDPModel(GraphSAGE(data.num_features, 16, num_layers=2,
                                        out_channels=data.num_classes)).eval()
    # Layer-wise inference: every rank its share of the nodes, gathered.
    loader = pyg_dist.DistNeighborLoader(data, num_neighbors=[-1], batch_size=301)
    x_all, seen = data.x, 0
    with torch.no_grad():
        for layer in range(2):
            xs = []
            for batch in loader:
                xs.append(model.inference_per_layer(layer, x_all[batch.n_id],
                                                    batch.edge_index, batch.batch_size))
                seen += batch.batch_size
            x_all = loader.gather(xs)
    # Mini-batch evaluation of 999 test nodes (odd: the split pads one rank).
    test_ids = data.test_mask.nonzero().view(-1)[:999]
    test_loader = pyg_dist.DistNeighborLoader(data, num_neighbors=[-1, -1],
                                              input_nodes=test_ids, batch_size=128)
    metrics = {"accuracy": pyg_dist.DistMetric("accuracy"),
               "auc": pyg_dist.DistMetric("auc"),
               "recall@3": pyg_dist.DistMetric("recall@3"),
               "callable": pyg_dist.DistMetric(lambda p, t: float((p > 0).float().mean()))}
    with torch.no_grad():
        for batch in test_loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            y = batch.y[:batch.batch_size]
            for name, metric in metrics.items():
                pred, target = {"auc": (out[:, 0], (y == 0).long()),
                                "callable": (out.sum(-1), y)}.get(name, (out, y))
                metric.update(pred, target, batch.input_id)
    torch.save({"emb": x_all, "seen": seen, "share": len(test_loader.dataset),
                "metrics": {k: m.compute() for k, m in metrics.items()}}, f"{result}.{rank}")
    del model
    dist.destroy_process_group()
    data.close()
""")


def _endpoints(stores) -> str:
    return ",".join(stores[0].router.endpoints)


@pytest.mark.slow
def test_two_ranks_evaluate_their_shares_and_agree_with_one_process(
        cora_data, cora_stores3, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "result"
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), "2",
                               str(tmp_path / "store"), _endpoints(cora_stores3), str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)[-5000:]
    results = [torch.load(f"{out}.{rank}") for rank in (0, 1)]

    torch.manual_seed(0)
    model = GraphSAGE(cora_data.num_features, 16, num_layers=2,
                      out_channels=7).eval()
    with torch.no_grad():
        full = model(cora_data.x, cora_data.edge_index)
    test_ids = cora_data.test_mask.nonzero().view(-1)[:999]
    out_t, y_t = full[test_ids], cora_data.y[test_ids]
    local = {"accuracy": DistMetric("accuracy"), "auc": DistMetric("auc"),
             "recall@3": DistMetric("recall@3"),
             "callable": DistMetric(lambda p, t: float((p > 0).float().mean()))}
    local["accuracy"].update(out_t, y_t)
    local["auc"].update(out_t[:, 0], (y_t == 0).long())
    local["recall@3"].update(out_t, y_t)
    local["callable"].update(out_t.sum(-1), y_t)
    n = cora_data.num_nodes
    for result in results:
        # Each rank computed its half of the nodes per layer (ceil: the pad).
        assert result["seen"] == 2 * ((n + 1) // 2)
        assert result["share"] == 500  # of 999 test inputs, padded to 2 x 500
        assert torch.allclose(result["emb"], full, atol=1e-5)
        for name, metric in local.items():
            assert result["metrics"][name] == pytest.approx(metric.compute(), abs=1e-6), name


def test_len_of_the_dataset_is_the_ranks_share(cora_data, cora_stores3):
    for rank in (0, 1):
        loader = DistNeighborLoader(cora_stores3, num_neighbors=[0], rank=rank, world_size=2,
                                    input_nodes=cora_data.train_mask, batch_size=16)
        batches = list(loader)
        assert len(loader.dataset) == 70 == sum(b.batch_size for b in batches)
        assert len(loader) == len(batches) == 5
    whole = DistNeighborLoader(cora_stores3, num_neighbors=[0], rank=0, world_size=2,
                               split=False, input_nodes=cora_data.train_mask, batch_size=16)
    assert len(whole.dataset) == 140


def test_global_batch_size_is_split_and_per_rank_batch_size_warns(cora_stores3):
    kw = dict(num_neighbors=[0], rank=0, world_size=2)
    assert DistNeighborLoader(cora_stores3, global_batch_size=64, shuffle=True,
                              **kw).batch_size == 32
    with pytest.warns(UserWarning, match="batch_size=32 is per rank"):
        DistNeighborLoader(cora_stores3, batch_size=32, shuffle=True, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # evaluation loaders: the size changes nothing
        DistNeighborLoader(cora_stores3, batch_size=32, **kw)
    with pytest.raises(LoaderError, match="not both"):
        DistNeighborLoader(cora_stores3, batch_size=32, global_batch_size=64, **kw)
    with pytest.raises(LoaderError, match="global_batch_size must be an int >= the world"):
        DistNeighborLoader(cora_stores3, global_batch_size=1, **kw)


def test_gather_without_a_split_is_the_concatenation(cora_stores3):
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[0], batch_size=1000)
    rows = [b.n_id[:b.batch_size].float() for b in loader]
    assert torch.equal(loader.gather(rows), torch.arange(2708).float())
    with pytest.raises(LoaderError, match="one row per input"):
        loader.gather(rows[:1])
    shuffled = DistNeighborLoader(cora_stores3, num_neighbors=[0], batch_size=1000,
                                  shuffle=True)
    with pytest.raises(LoaderError, match="shuffle=False"):
        shuffled.gather([b.n_id[:b.batch_size].float() for b in shuffled])


def test_metrics_match_their_definitions():
    score = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    target = torch.tensor([0, 0, 1, 1, 1])
    # Pairs (pos, neg): (0.35>0.1), (0.35<0.4), (0.8 > both), (0.4>0.1), (0.4=0.4: half).
    assert roc_auc(score, target) == pytest.approx(4.5 / 6)
    scores = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.3, 0.1]])
    assert recall_at_k(scores, torch.tensor([2, 2]), 2) == pytest.approx(0.5)
    metric = DistMetric("accuracy")
    metric.update(torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.8, 0.2]]), torch.tensor([1, 1, 1]),
                  torch.tensor([4, 7, 7]))  # a padded repeat of input 7 counts once
    assert metric.compute() == pytest.approx(0.5)
    with pytest.raises(LoaderError, match="unknown metric"):
        DistMetric("f1")
