"""``pyg-dist plugins``, and the separately installable example plugin found
through the registry once installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pyg_dist.cli import main
from pyg_dist.partitioning import PartitionReader

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "plugins" / "example-partitioner"


def test_plugins_lists_every_bundled_plugin_with_group_and_distribution(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {tuple(line.split()[:2]): line for line in out[1:]}
    for group in ("pyg_dist.partitioners",):
        for name in ("metis", "random"):
            assert "pyg-dist 0.1.0" in rows[group, name]
    for group in ("pyg_dist.feature_stores", "pyg_dist.graph_stores"):
        for name in ("memory", "mmap"):
            assert "pyg-dist" in rows[group, name]
    assert "pyg_dist_plugins.partitioners.metis:MetisPartitioner" in rows[
        "pyg_dist.partitioners", "metis"]


def test_example_plugin_installs_registers_and_partitions(tmp_path):
    # Build from a copy so that setuptools' build/ and egg-info stay out of the repo.
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONWARNINGS="ignore")

    listed = subprocess.run([sys.executable, "-m", "pyg_dist", "plugins"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if ln.split()[:2] == [
        "pyg_dist.partitioners", "ranges"])
    assert "pyg-dist-example-partitioner 0.1.0" in line
    assert "pyg_dist_example_partitioner:RangePartitioner" in line

    root = tmp_path / "cora-ranges"
    done = subprocess.run(
        [sys.executable, "-m", "pyg_dist", "partition", "pyg_dist.datasets:cora", str(root),
         "-n", "4", "-p", "ranges", "-o", "balance=edges", "--no-progress"],
        capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    meta = json.loads((root / "meta.json").read_text())
    assert meta["partitioner"]["name"] == "ranges"
    assert meta["partitioner"]["options"] == {"balance": "edges"}
    assert meta["partitioner"]["distribution"] == "pyg-dist-example-partitioner 0.1.0"
    assert meta["stats"]["edge_balance"] < 1.1
    # Contiguous ranges: the owner of id i+1 is never a lower part than i's.
    owners = PartitionReader(root).book.to_tensor().long()
    assert bool((owners.diff() >= 0).all()) and owners.unique().tolist() == [0, 1, 2, 3]



def test_an_uninstalled_plugin_is_unknown_and_nothing_is_written(tmp_path, capsys):
    # The example plugin is never installed into the venv, so here it is unknown.
    code = main(["partition", "pyg_dist.datasets:fake", str(tmp_path / "nope"), "-n", "2",
                 "-p", "ranges", "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    assert "no plugin named 'ranges'" in err and "metis" in err
    assert list(tmp_path.iterdir()) == []
