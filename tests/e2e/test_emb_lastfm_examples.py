"""The LastFM recommendation example with learned embeddings only: user and
artist tables on the partition servers (``pyg_dist.DistEmbedding``, 2 parts,
2 ranks under ``pyg-dist launch``, ``pyg_dist.optim.SparseAdam``) reach the
test AUC of the one-process ``nn.Embedding`` reference at equal optimiser
steps."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.examples import EXAMPLES, REPO, example_module, printed_value
from support.servers import run_process_tree

from pyg_dist.partitioning.writer import partition


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lastfm_embeddings_train_under_launch_as_well_as_in_one_process(tmp_path):
    train_graph = example_module("lastfm_link_split").train_graph
    root = str(tmp_path / "lastfm-emb")
    partition(train_graph(), 2, root)
    args = ["--seed", "0", "--epochs", "2", "--dim", "32"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(REPO), env.get("PYTHONPATH", "")])
    dist = run_process_tree(
        [sys.executable, "-m", "pyg_dist", "launch", root, "--nproc", "2", "--",
         str(EXAMPLES / "train_emb_lastfm_dist.py"), *args], timeout=400, env=env)
    assert dist.returncode == 0, dist.stdout[-2000:] + dist.stderr[-4000:]
    local = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_emb_lastfm_local.py"), *args],
        capture_output=True, text=True, timeout=300, env=env)
    assert local.returncode == 0, local.stderr[-4000:]
    dist_auc = printed_value("test_auc", dist.stdout)
    local_auc = printed_value("test_auc", local.stdout)
    assert "steps=80" in dist.stdout and "steps=80" in local.stdout  # equal steps
    assert local_auc > 0.8, local_auc  # a random scorer gives 0.5
    assert abs(dist_auc - local_auc) < 0.01, (dist_auc, local_auc)
