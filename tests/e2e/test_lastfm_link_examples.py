"""The LastFM recommendation examples end to end: ``to_hetero(GraphSAGE)``
with a dot-product decoder trains on the served training graph under
``pyg-dist launch`` (2 parts, 2 DDP ranks) about as well as the one-process
reference, and both report AUC and recall@20 on the held-out listens."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.examples import EXAMPLES, REPO, example_module, printed_value
from support.servers import run_process_tree

from pyg_dist.partitioning.writer import partition


@pytest.mark.timeout(600)
def test_lastfm_recommendation_trains_under_launch_as_well_as_in_one_process(tmp_path):
    train_graph = example_module("lastfm_link_split").train_graph
    root = str(tmp_path / "lastfm-link")
    partition(train_graph(), 2, root)
    # A short config (one epoch, big batches, small fan-out and embeddings):
    # under a minute each way on two idle cores.
    args = ["--seed", "0", "--epochs", "1", "--hidden", "32", "--batch-size", "1024",
            "--fanout", "5", "5"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    dist = run_process_tree(
        [sys.executable, "-m", "pyg_dist", "launch", root, "--nproc", "2", "--",
         str(EXAMPLES / "train_link_lastfm_dist.py"), *args], timeout=400, env=env)
    assert dist.returncode == 0, dist.stdout[-2000:] + dist.stderr[-4000:]
    local = subprocess.run([sys.executable, str(EXAMPLES / "train_link_lastfm_local.py"), *args],
                           capture_output=True, text=True, timeout=300, env=env)
    assert local.returncode == 0, local.stderr[-4000:]
    dist_auc = printed_value("test_auc", dist.stdout)
    local_auc = printed_value("test_auc", local.stdout)
    # One epoch each, so the bounds are loose; a random scorer gives 0.5 and
    # recall@20 about 20 / 18,022.
    assert dist_auc > 0.7 and local_auc > 0.7, (dist_auc, local_auc)
    assert abs(dist_auc - local_auc) < 0.08, (dist_auc, local_auc)
    for output in (dist.stdout, local.stdout):
        assert 0.01 < printed_value("test_recall20", output) <= 1.0, output[-2000:]
