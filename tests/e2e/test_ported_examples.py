"""PyG's reddit.py and ogbn_products_sage.py, ported in at most 12 lines.

``examples/reddit_local.py`` / ``reddit_dist.py`` and ``products_local.py``
/ ``products_dist.py``: the diff of each pair is counted as the issue counts
it (``diff -u local dist | grep -c '^[-+][^-+]'``), and both scripts of a
pair train on the same small offline graph, the distributed one under
``pyg-dist launch --nproc 2`` with ``global_batch_size`` equal to the local
``batch_size`` (so the same optimiser steps), to test accuracies within two
points.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.examples import EXAMPLES, example_module, printed_value

PAIRS = ("reddit", "products")
MAX_CHANGED_LINES = 12


def changed_lines(name: str) -> list[str]:
    """The ``-``/``+`` lines of ``diff -u`` between the pair, as the issue counts them."""
    out = subprocess.run(["diff", "-u", str(EXAMPLES / f"{name}_local.py"),
                          str(EXAMPLES / f"{name}_dist.py")], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1, out.stderr  # 1: the files differ
    return [line for line in out.stdout.splitlines()
            if len(line) > 1 and line[0] in "-+" and line[1] not in "-+"]


@pytest.mark.parametrize("name", PAIRS)
def test_each_port_changes_at_most_12_lines(name):
    changed = changed_lines(name)
    assert 0 < len(changed) <= MAX_CHANGED_LINES, "\n".join(changed)


def _run(command: list[str], timeout: float = 300) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(EXAMPLES), os.environ.get("PYTHONPATH", "")]), PYTHONUNBUFFERED="1")
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return out.stdout


def _launch(root: str, script: str, *args: str) -> str:
    return _run([sys.executable, "-m", "pyg_dist", "launch", root, "--nproc", "2",
                 "--quiet-ranks", str(EXAMPLES / script), *args])


@pytest.mark.slow
@pytest.mark.parametrize("name, epochs", [("reddit", "3"), ("products", "3")])
def test_local_and_ported_scripts_reach_the_same_accuracy(name, epochs, tmp_path):
    datasets = example_module("offline_datasets")
    root = str(tmp_path / "parts")
    if name == "reddit":
        import pyg_dist

        pyg_dist.partition(datasets.reddit_graph(), 2, root)
    else:
        datasets.partition_products(root, 2)
    local = _run([sys.executable, str(EXAMPLES / f"{name}_local.py"), "--epochs", epochs])
    dist = _launch(root, f"{name}_dist.py", "--epochs", epochs)
    # --quiet-ranks: rank 0 alone prints, once.
    assert dist.count("test_acc=") == 1, dist[-3000:]
    local_acc, dist_acc = printed_value("test_acc", local), printed_value("test_acc", dist)
    assert abs(local_acc - dist_acc) <= 0.02, (local_acc, dist_acc)
    assert local_acc > 0.5  # it learned something: the comparison means something
