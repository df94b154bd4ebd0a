"""The link-prediction and layer-wise inference examples, end to end under ``pyg-dist launch``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from support.examples import EXAMPLES, example_module, launch_command, printed_value
from support.servers import run_process_tree

from pyg_dist.datasets import cora
from pyg_dist.partitioning.writer import partition


@pytest.mark.timeout(600)
def test_link_prediction_trains_under_launch_as_well_as_in_one_process(tmp_path):
    train_graph = example_module("cora_link_split").train_graph
    root = str(tmp_path / "cora-link")
    partition(train_graph(), 2, root)
    args = ["--seed", "0", "--epochs", "2"]
    dist = run_process_tree(
        launch_command(root, 2, str(EXAMPLES / "train_link_cora_dist.py"), *args), timeout=400)
    assert dist.returncode == 0, dist.stdout[-2000:] + dist.stderr[-4000:]
    local = subprocess.run([sys.executable, str(EXAMPLES / "train_link_cora_local.py"), *args],
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-4000:]
    dist_auc = printed_value("test_auc", dist.stdout)
    local_auc = printed_value("test_auc", local.stdout)
    # One short run each, so the bound is loose; a random scorer gives 0.5.
    assert dist_auc > 0.75 and local_auc > 0.75, (dist_auc, local_auc)
    assert abs(dist_auc - local_auc) < 0.08, (dist_auc, local_auc)


@pytest.mark.timeout(600)
def test_layerwise_inference_equals_a_full_batch_pass(tmp_path):
    root = str(tmp_path / "cora2")
    partition(cora(), 2, root)
    out = run_process_tree(
        launch_command(root, 2, str(EXAMPLES / "infer_layerwise_dist.py"), "--check",
                       "--hidden", "32"),
        timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert re.search(r"^embeddings=2708x32$", out.stdout, flags=re.M), out.stdout[-2000:]
    assert printed_value("max_abs_diff", out.stdout) < 1e-4
