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


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(EXAMPLES), os.environ.get("PYTHONPATH", "")]), PYTHONUNBUFFERED="1")


def _output(proc: subprocess.Popen, timeout: float = 300) -> str:
    """The process' stdout once it exited 0 (killed, and the test failed, otherwise)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    return out


def _start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())


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
    # Both at once (the launched one waits for its servers meanwhile).
    local_proc = _start([sys.executable, str(EXAMPLES / f"{name}_local.py"), "--epochs", epochs])
    try:
        dist = _output(_start([sys.executable, "-m", "pyg_dist", "launch", root, "--nproc",
                               "2", "--quiet-ranks", str(EXAMPLES / f"{name}_dist.py"),
                               "--epochs", epochs]))
    finally:
        local = _output(local_proc)
    # --quiet-ranks: rank 0 alone prints, once.
    assert dist.count("test_acc=") == 1, dist[-3000:]
    local_acc, dist_acc = printed_value("test_acc", local), printed_value("test_acc", dist)
    assert abs(local_acc - dist_acc) <= 0.02, (local_acc, dist_acc)
    assert local_acc > 0.5  # it learned something: the comparison means something
