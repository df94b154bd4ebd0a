"""``examples/temporal_lastfm.py`` end to end at a tiny size: partition, serve,
temporal and weighted DistNeighborLoader, train on the past, score the future."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from support.servers import run_process_tree

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_temporal_lastfm_example_trains_and_scores_the_future():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "plugins"), env.get("PYTHONPATH", "")])
    run = run_process_tree(
        [sys.executable, str(REPO / "examples" / "temporal_lastfm.py"), "--max-events", "2000",
         "--epochs", "1", "--fanout", "5", "5", "--test-events", "300"],
        timeout=400, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "events=2000 train=1600 test=300" in run.stdout
    assert re.search(r"^epoch=0 loss=\d+\.\d+$", run.stdout, re.M), run.stdout
    auc = float(re.findall(r"^test_auc=([0-9.]+)$", run.stdout, re.M)[-1])
    assert 0.0 <= auc <= 1.0
