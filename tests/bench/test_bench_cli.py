"""`pyg-dist bench` runs end to end on a small graph and its rows are consistent
(the link-delay rows through the benchmarks package's proxy)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

LIMIT_S = 270  # a loaded 2-core machine needs ~150 s: every process imports torch


def _run_bench(*args: str) -> subprocess.CompletedProcess:
    """Runs ``pyg-dist bench``; past the limit, or if the test fails, Ctrl-C
    first, so that the bench stops its servers and proxy itself (they run in
    sessions of their own: killing the bench alone would orphan them)."""
    proc = subprocess.Popen([sys.executable, "-m", "pyg_dist", "bench", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.timeout(LIMIT_S + 60)
def test_bench_runs_and_prefetch_does_the_same_work(tmp_path):
    out = tmp_path / "bench.json"
    proc = _run_bench("--num-nodes", "3000", "--avg-degree", "8", "--num-features", "64",
                      "--num-batches", "3", "--batch-size", "128", "--prefetch", "2",
                      "--link-delay-ms", "1", "--partitioner", "random", "--embedding",
                      "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pyg-dist K=2 / pyg-local (seeds/s)" in proc.stdout
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    for name in ("pyg-local NeighborLoader", "pyg-dist K=0", "pyg-dist K=2",
                 "pyg-dist K=0 colocated", "pyg-dist K=2 colocated",
                 "pyg-dist K=2 over TCP", "pyg-dist K=2 x2 trainers",
                 "epoch compute only", "epoch train K=0", "epoch train K=2",
                 "epoch train K=0 @1ms", "epoch train K=2 @1ms",
                 "epoch train K=2, DistEmbedding", "epoch train K=2, input gradient",
                 "epoch train K=2, local nn.Embedding"):
        assert rows[name]["batches"] == 3 and rows[name]["seeds"] == 3 * 128, name
    # The same seed gives the same batches with and without prefetch, with
    # and without shared memory (64 features: ~100 KB replies, over the
    # shared memory threshold), behind the delay proxy too: the same sampled
    # edges and feature bytes.
    for a, b in (("pyg-dist K=0", "pyg-dist K=2"), ("pyg-dist K=2", "pyg-dist K=2 over TCP"),
                 ("pyg-dist K=2", "pyg-dist K=2 colocated"),
                 ("epoch train K=0 @1ms", "epoch train K=2 @1ms")):
        assert rows[a]["edges"] == rows[b]["edges"] > 0
        assert rows[a]["feature_bytes"] == rows[b]["feature_bytes"] > 0
    # The baseline rows come only with --baseline (and the benchmarks package).
    assert not [name for name in rows if name.startswith("pyg-distributed")]
    # Two trainer processes share the seeds: together they load every batch once.
    assert rows["pyg-dist K=2 x2 trainers"]["edges"] > 0
    assert set(result["ratios"]) >= {"pyg-dist K=2 / pyg-local (seeds/s)",
                                     "pyg-dist K=2 colocated / pyg-local (seeds/s)",
                                     "pyg-dist K=2 over TCP / pyg-local (seeds/s)",
                                     "epoch K=2 / max(compute, loader)",
                                     "epoch K=2 / K=0 @1ms (time)",
                                     "epoch K=2 DistEmbedding / fixed features (seeds/s)",
                                     "epoch K=2 input gradient / fixed features (seeds/s)",
                                     "epoch K=2 local nn.Embedding / fixed features (seeds/s)",
                                     "epoch K=2 DistEmbedding / input gradient (seeds/s)"}
    # The embedding epoch trains on the same batches, its input learned: the
    # same edges, and y but no x among the bytes counted.
    learned = rows["epoch train K=2, DistEmbedding"]
    assert learned["edges"] == rows["epoch train K=2"]["edges"]
    assert 0 < learned["feature_bytes"] < rows["epoch train K=2"]["feature_bytes"]
    # The two rows that say what learning the input costs train on the fixed
    # features' batches (x among the bytes; the local table ignores it).
    for name in ("epoch train K=2, input gradient", "epoch train K=2, local nn.Embedding"):
        assert rows[name]["edges"] == rows["epoch train K=2"]["edges"]
        assert rows[name]["feature_bytes"] == rows["epoch train K=2"]["feature_bytes"]


@pytest.mark.timeout(LIMIT_S + 60)
def test_bench_hetero_mode_measures_the_heterogeneous_loader(tmp_path):
    out = tmp_path / "hetero.json"
    proc = _run_bench("--hetero", "--num-nodes", "3000", "--avg-degree", "3",
                      "--num-features", "16", "--num-batches", "2", "--batch-size", "64",
                      "--prefetch", "2", "--partitioner", "random", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    loaders = [f"pyg-dist {kind} K={k}{hops}" for kind in ("hetero", "homogeneous")
               for k in (0, 2) for hops in ("", " server hops")]
    for name in ("pyg-local hetero NeighborLoader", *loaders):
        assert rows[name]["batches"] == 2 and rows[name]["seeds"] == 2 * 64, name
    # The same seed gives the same batches with and without prefetch...
    assert rows["pyg-dist hetero K=0"]["edges"] == rows["pyg-dist hetero K=2"]["edges"] > 0
    assert rows["pyg-dist hetero K=0"]["feature_bytes"] == \
        rows["pyg-dist hetero K=2"]["feature_bytes"] > 0
    # ... and whether the servers or the trainer sample the hops (the same
    # warm-up before each: the same draws of the sampler's generator).
    for name in loaders:
        if name.endswith(" server hops"):
            hop_by_hop = rows[name.removesuffix(" server hops")]
            for field in ("edges", "feature_bytes"):
                assert rows[name][field] == hop_by_hop[field] > 0, (name, field)
    assert set(result["ratios"]) == {
        f"{a} K={k}{b}" for k in (0, 2) for a, b in (
            ("pyg-dist hetero", " / pyg-local hetero (seeds/s)"),
            ("hetero / homogeneous cost per seed", ""),
            ("hetero / homogeneous cost per sampled edge", ""),
            ("hetero", " server hops / hop by hop (seeds/s)"))}


def test_bench_hetero_refuses_the_rows_it_does_not_measure():
    proc = _run_bench("--hetero", "--baseline")
    assert proc.returncode == 1
    assert "--hetero measures the loaders only" in proc.stderr
