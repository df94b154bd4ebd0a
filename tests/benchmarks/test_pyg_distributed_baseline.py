"""The PyG ``torch_geometric.distributed`` baseline really runs, and samples right.

The end-to-end tests start real processes (one per partition, torch RPC on
loopback) through :func:`run_pyg_distributed_baseline`. If PyG's distributed
package cannot be imported or run, they FAIL with the reason: the bench table
must never silently lose its baseline.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from safetensors.torch import load_file
from torch_geometric.datasets import FakeDataset

from pyg_dist_bench.pyg_baseline_ops import (
    dist_neighbor_sample,
    merge_sampler_outputs,
    relabel_neighborhood,
)
from pyg_dist_bench.pyg_distributed_baseline import run_pyg_distributed_baseline

FANOUT = [5, 3]
BATCH = 32
RECORDED = 3


def _tiny_graph():
    random.seed(0)
    torch.manual_seed(0)
    # Directed, so that a reversed edge would be caught.
    return FakeDataset(num_graphs=1, avg_num_nodes=2000, avg_degree=8, num_channels=8,
                       num_classes=4, is_undirected=False)[0]


def _csc(num_nodes: int, num_edges: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    col, perm = ei[1].sort()
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.cumsum(torch.bincount(col, minlength=num_nodes), 0)
    return colptr, ei[0][perm]


@pytest.mark.parametrize("num_nodes,num_edges,k,replace", [
    (200, 2000, -1, False), (200, 2000, 0, False), (200, 2000, 3, False),
    (200, 2000, 50, False), (200, 2000, 3, True),
    (40, 8000, 100, False),  # fan-out above the Floyd limit: the sort path
])
def test_dist_neighbor_sample_matches_pyg_lib_contract(num_nodes, num_edges, k, replace):
    colptr, row = _csc(num_nodes, num_edges)
    seed = torch.randperm(num_nodes)[:40]
    node, pos, cumsum = dist_neighbor_sample(colptr, row, seed, k, csc=True, replace=replace)
    deg = colptr[seed + 1] - colptr[seed]
    expected = deg if k < 0 else (torch.where(deg > 0, k, 0) if replace else deg.clamp(max=k))
    assert node[:40].equal(seed)  # seeds first, then neighbours with duplicates
    assert cumsum[0] == 40 and torch.tensor(cumsum).diff().equal(expected)
    assert node[40:].equal(row[pos])  # edge ids are CSC positions
    begin = 0
    for i, c in enumerate(expected.tolist()):
        mine = pos[begin:begin + c]
        begin += c
        assert bool(((mine >= colptr[seed[i]]) & (mine < colptr[seed[i] + 1])).all())
        if not replace:
            assert mine.unique().numel() == c


def test_dist_neighbor_sample_draws_uniform_subsets():
    torch.manual_seed(0)  # deterministic: the bounds below hold for this stream
    colptr = torch.tensor([0, 20])
    row = torch.arange(20)
    _, pos, _ = dist_neighbor_sample(colptr, row, torch.zeros(4000, dtype=torch.long), 5)
    hits = torch.bincount(pos, minlength=20)  # expected 4000 * 5 / 20 = 1000 each
    assert int(hits.sum()) == 20_000 and int(hits.min()) > 900 and int(hits.max()) < 1100


def test_merge_and_relabel_match_pyg_lib_reference_loops():
    colptr, row = _csc(300, 3000, seed=1)
    srcs = torch.randperm(300)[:60]
    pids = torch.randint(0, 3, (60,))
    orders = torch.zeros(60, dtype=torch.long)
    outs = []
    for p in range(3):
        mask = pids == p
        orders[mask] = torch.arange(int(mask.sum()))
        outs.append(dist_neighbor_sample(colptr, row, srcs[mask], 4))
    nodes, edges, cums = zip(*outs)
    node, edge, _, counts = merge_sampler_outputs(list(nodes), list(edges), list(cums),
                                                  pids.tolist(), orders.tolist(), 3, 4)
    ref_node, ref_edge, ref_counts = [], [], []  # pyg-lib's loop, transcribed
    for p, o in zip(pids.tolist(), orders.tolist()):
        b, e, f = cums[p][o], cums[p][o + 1], cums[p][0]
        ref_node += nodes[p][b:e].tolist()
        ref_edge += edges[p][b - f:e - f].tolist()
        ref_counts.append(e - b)
    assert node.tolist() == ref_node and edge.tolist() == ref_edge and counts == ref_counts

    seed = srcs[:10]
    sampled = torch.randint(0, 80, (40,))
    per_node = [4] * 10
    mapper = {int(s): i for i, s in enumerate(seed)}
    ref_row, ref_col = [], []
    for j, v in enumerate(sampled.tolist()):
        mapper.setdefault(v, len(mapper))
        ref_row.append(j // 4)
        ref_col.append(mapper[v])
    for num_nodes in (300, 10**9):  # dense mapper, and the sort-based one
        out_row, out_col = relabel_neighborhood(seed, sampled, per_node, num_nodes, None, True,
                                                False)
        assert out_row.tolist() == ref_col and out_col.tolist() == ref_row  # csc swaps


def _check_batch(rec: dict, i: int, data, edge_keys: set, in_deg: torch.Tensor) -> None:
    n = data.num_nodes
    n_id, ei = rec[f"b{i}.n_id"], rec[f"b{i}.edge_index"]
    input_id = rec[f"b{i}.input_id"]
    bs = input_id.numel()
    assert bs == BATCH
    assert n_id[:bs].equal(rec["seeds"][input_id])  # seeds first, in batch order
    assert n_id.unique().numel() == n_id.numel()
    src, dst = n_id[ei[0]], n_id[ei[1]]
    assert set((src * n + dst).tolist()) <= edge_keys  # every edge exists, this direction
    assert rec[f"b{i}.x"].equal(data.x[n_id]) and rec[f"b{i}.y"].equal(data.y[n_id])
    # Exactly min(in-degree, fan-out) neighbours per sampled target, per hop.
    per_target = torch.bincount(ei[1], minlength=n_id.numel())
    hop_nodes = rec[f"b{i}.num_sampled_nodes"].tolist()
    begin = 0
    for hop, k in enumerate(FANOUT):
        end = begin + hop_nodes[hop]
        targets = n_id[begin:end]
        assert per_target[begin:end].equal(in_deg[targets].clamp(max=k))
        begin = end
    assert int(per_target[begin:].sum()) == 0
    assert rec[f"b{i}.num_sampled_edges"].sum() == ei.size(1)


def test_pyg_distributed_baseline_runs_and_samples_valid_batches(tmp_path):
    data = _tiny_graph()
    out = run_pyg_distributed_baseline(data, 2, FANOUT, BATCH, 4, str(tmp_path / "run"),
                                       timeout_s=90, record_batches=RECORDED)
    assert out["status"] == "ok", f"baseline did not run: {out.get('result')}\n" \
                                  f"{out.get('traceback')}"
    assert out["batches"] == 8 and out["seeds"] == 8 * BATCH
    assert out["seeds_per_s"] > 0 and out["edges_per_s"] > 0
    assert "pure-torch stand-in for pyg-lib's dist_neighbor_sample" in out["note"]
    n = data.num_nodes
    edge_keys = set((data.edge_index[0] * n + data.edge_index[1]).tolist())
    in_deg = torch.bincount(data.edge_index[1], minlength=n)
    owners = []
    for rank_info in out["per_rank"]:
        rec = load_file(rank_info["record_path"])
        owners.append(set(rec["seeds"].tolist()))
        for i in range(RECORDED):
            _check_batch(rec, i, data, edge_keys, in_deg)
    assert not owners[0] & owners[1]  # each process trains on its own partition's seeds
    for pid in out["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_pyg_distributed_baseline_reports_hang_and_kills_processes(tmp_path):
    data = _tiny_graph()
    # Far less time than the processes need to start: the run must be cut off.
    out = run_pyg_distributed_baseline(data, 2, FANOUT, BATCH, 10_000, str(tmp_path / "run"),
                                       timeout_s=0.5)
    assert out["status"] == "hung" and out["result"] == "hung after 0.5 s"
    assert out.get("seeds_per_s") is None
    for pid in out["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_pyg_distributed_baseline_reports_worker_errors(tmp_path):
    data = _tiny_graph()
    # Each partition owns ~1,000 seeds: not one batch of 5,000 (drop_last).
    out = run_pyg_distributed_baseline(data, 2, FANOUT, 5000, 2, str(tmp_path / "run"),
                                       timeout_s=90)
    assert out["status"] == "error"
    assert "fewer than one batch of 5000" in out["error"]
    assert out["note"].startswith("error: ValueError")
    for pid in out["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
