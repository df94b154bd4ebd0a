"""LocalCluster shares the host's cores among the servers it starts: each
gets ``--threads`` = cores // (servers x workers), unless the caller chose
(``--threads`` in ``serve_args``, or ``PYG_DIST_THREADS``). Real server
processes; what they were started with is read back from the OS."""

from __future__ import annotations

import os

import psutil
import pytest

from pyg_dist.cluster import LocalCluster
from pyg_dist.datasets import fake
from pyg_dist.partitioning.writer import partition


@pytest.fixture(scope="module")
def fake2(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads") / "fake2"
    partition(fake(num_nodes=400, avg_degree=4, num_channels=8, num_classes=2, seed=0), 2,
              str(root), partitioner="random", progress=False)
    return root


def _threads_of(cluster: LocalCluster) -> list[list[str]]:
    """Every ``--threads`` value on each server's command line."""
    found = []
    for proc in cluster.processes:
        cmd = psutil.Process(proc.pid).cmdline()
        found.append([cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--threads"])
    return found


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYG_DIST_THREADS", "PYG_DIST_WORKERS")}
    return {**env, **extra}


def test_servers_share_the_cores_among_them(fake2):
    with LocalCluster(fake2, env=_env(), serve_args=["--workers", "2"]) as cluster:
        expected = str(max(1, (os.cpu_count() or 1) // (2 * 2)))
        assert _threads_of(cluster) == [[expected], [expected]]


def test_workers_from_the_environment_count(fake2):
    # One server of one worker: every core (2 on CI, so the division shows).
    with LocalCluster(fake2, parts=[1], env=_env(PYG_DIST_WORKERS="1")) as cluster:
        assert _threads_of(cluster) == [[str(os.cpu_count() or 1)]]


def test_the_callers_choice_wins(fake2):
    with LocalCluster(fake2, env=_env(), serve_args=["--threads", "3"]) as cluster:
        assert _threads_of(cluster) == [["3"], ["3"]]
    with LocalCluster(fake2, env=_env(PYG_DIST_THREADS="2")) as cluster:
        assert _threads_of(cluster) == [[], []]
