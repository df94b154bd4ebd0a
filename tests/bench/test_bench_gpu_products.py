"""benchmarks/bench_gpu_products.py runs end to end at a tiny scale on the
CPU and prints every row the issue's table asks for, as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_tiny_products_run_prints_every_row(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_gpu_products.py"), "--scale", "0.002",
         "--device", "cpu", "--fanouts", "5,3", "--batches", "2", "--warmup", "1",
         "--batch-size", "128", "--prefetch", "2", "--hidden", "16",
         "--cache-capacity", "1.0", "--cache", str(tmp_path),
         "--sampling", "server_hops", "server_hops_fetched", "hop_by_hop"],
        capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    kinds = {(r["row"], r.get("sampling"), r.get("cache")) for r in rows}
    for cache in ("uncached", "all"):
        for sampling in ("server_hops", "server_hops_fetched", "hop_by_hop"):
            for row in ("train", "loader"):
                assert (row, sampling, cache) in kinds
    assert ("compute", None, None) in kinds
    for r in rows:
        if r["row"] in ("train", "loader"):
            assert r["seeds_per_s"] > 0 and r["sampled_nodes_per_s"] > r["seeds_per_s"]
            assert r["vs_compute"] > 0 and r["fanout"] == [5, 3]


@pytest.mark.timeout(300)
def test_loader_processes_row_adds_up_every_process(tmp_path):
    # --trainers N: N real trainer processes against the same servers, each
    # over its share of the seeds; the row adds their seeds up.
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_gpu_products.py"), "--scale", "0.002",
         "--device", "cpu", "--fanouts", "5,3", "--batches", "3", "--warmup", "1",
         "--batch-size", "64", "--prefetch", "1", "--trainers", "2", "--cache", str(tmp_path)],
        capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    (row,) = [r for r in rows if r["row"] == "loader_processes"]
    assert row["trainers"] == 2 and len(row["each_seeds_per_s"]) == 2
    assert len(row["trainer_cores"]) == 2 and len(row["server_cores"]) == 4
    # 3 batches of 64 seeds in each process, timed together.
    assert all(r > 0 for r in row["each_seeds_per_s"])
    # All seeds over the longest process's time: between the slowest one's
    # rate and the rates added up.
    each = row["each_seeds_per_s"]
    assert min(each) * 0.999 <= row["seeds_per_s"] <= sum(each) * 1.001
