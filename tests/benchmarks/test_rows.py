"""``pyg-dist bench --baseline`` measures PyG's ``torch_geometric.distributed``
as shipped and tuned, and compares pyg-dist's rows with them."""

from __future__ import annotations

import random

import torch
from torch_geometric.datasets import FakeDataset

from pyg_dist_bench.bench_config import BenchConfig
from pyg_dist_bench.report import ratios
from pyg_dist_bench.rows import baseline_rows
from pyg_dist_bench.timing import Row


def test_baseline_rows_measure_pyg_distributed_as_shipped_and_tuned(tmp_path):
    random.seed(0)
    torch.manual_seed(0)
    data = FakeDataset(num_graphs=1, avg_num_nodes=2000, avg_degree=8, num_channels=8,
                       num_classes=4)[0]
    cfg = BenchConfig(num_parts=2, num_neighbors=[5, 3], batch_size=32, num_batches=4)
    # Enough seeds that each part owns two batches of them (PyG drops the last).
    seeds = torch.randperm(data.num_nodes)[:512]

    rows = baseline_rows(cfg, data, seeds, str(tmp_path))

    assert [r.name for r in rows] == ["pyg-distributed", "pyg-distributed +malloc tuning"]
    for row in rows:
        # Two processes, each its share (2) of the 4 batches.
        assert (row.batches, row.seeds) == (4, 4 * 32), row.note
        assert row.edges > 0 and row.seconds > 0
        assert "pure-torch stand-in for pyg-lib's dist_neighbor_sample" in row.note
    own = Row("pyg-dist K=4", rows[0].seconds / 2, 4, 4 * 32, rows[0].edges, 0)
    got = ratios([own, *rows], cfg, [r.name for r in rows])
    assert got["pyg-dist K=4 / pyg-distributed (seeds/s)"] == own.seeds_per_s / rows[
        0].seeds_per_s
    assert "pyg-dist K=4 / pyg-distributed +malloc tuning (seeds/s)" in got
