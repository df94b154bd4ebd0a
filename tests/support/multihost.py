"""Servers and trainers placed on simulated hosts (:mod:`support.hosts`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from support.hosts import SimHost, host_files

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_sage_dist.py"
SERVE_PORT = 5555
# Importing torch in a fresh process takes seconds on a busy machine.
STARTUP_S = 120.0


def read_line(proc: subprocess.Popen, prefix: str, timeout: float) -> str:
    """The first line of ``proc``'s stdout starting with ``prefix``."""
    found: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            if line.startswith(prefix):
                found.append(line.strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no {prefix!r} line within {timeout} s (exit code {proc.poll()})"
    return found[0]


def serve_on(hosts: list[SimHost], root: Path, workdir: Path) -> list[str]:
    """Serves part K on ``hosts[K]`` at ``ADDRESS:5555``; returns ``host:port``s."""
    procs = []
    for k, host in enumerate(hosts):
        files = host_files(root, workdir / host.name, [k])
        procs.append(host.popen(
            [sys.executable, "-m", "pyg_dist", "serve", str(files), "--part", str(k),
             "--bind", f"{host.address}:{SERVE_PORT}", "--workers", "1"],
            stdout=subprocess.PIPE))
    deadline = time.monotonic() + STARTUP_S
    for proc in procs:
        read_line(proc, "ready ", max(1.0, deadline - time.monotonic()))
    return [f"{host.address}:{SERVE_PORT}" for host in hosts]


def torchrun(node_rank: int, master: SimHost, *script: str) -> list[str]:
    """Plain multi-node torchrun, one process per node, two nodes."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--node-rank", str(node_rank), "--nproc-per-node", "1",
            "--rdzv-endpoint", f"{master.address}:29400", *script]
