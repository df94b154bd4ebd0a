"""Real ``pyg-dist serve`` processes for tests.

Two context managers, both built on :class:`pyg_dist.cluster.LocalCluster`
(the launcher's own process handling), so tests exercise the same start-up
and teardown path users get:

* :func:`serve_parts` starts one server process per part and yields the
  cluster (``.endpoints`` ordered by part, ``.processes``).
* :func:`serve_part` starts one server and yields ``(process, endpoint)``,
  for tests that signal or kill it themselves.

Every process is stopped on exit (SIGTERM, then SIGKILL after a grace
period), also when the test fails, and start-up waits at most
``startup_timeout`` seconds for each ``ready <endpoint>`` line.

Example::

    from support.servers import serve_parts

    with serve_parts(root, serve_args=["--workers", "2"]) as cluster:
        client = RpcClient(cluster.endpoints)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from typing import Optional

from pyg_dist.cluster import LocalCluster

# Importing torch in a fresh process takes seconds on a busy CI machine.
STARTUP_TIMEOUT = 120.0


@contextlib.contextmanager
def serve_parts(root: str | os.PathLike, parts: Optional[Sequence[int]] = None, *,
                serve_args: Sequence[str] = (), env: Optional[dict[str, str]] = None,
                startup_timeout: float = STARTUP_TIMEOUT,
                forwarding: bool = False) -> Iterator[LocalCluster]:
    """Serves ``parts`` (all by default) of the dataset at ``root``.

    Args:
        root: The partitioned dataset.
        parts: Which parts to serve, one process each.
        serve_args: Extra ``pyg-dist serve`` arguments, e.g. ``["--workers", "2"]``.
        env: Environment of the server processes (default: this one's).
        startup_timeout: Seconds to wait for all ``ready`` lines.
        forwarding: Let the servers sample a batch's hops among themselves
            (``sample_tree``; see :class:`~pyg_dist.cluster.LocalCluster`).
    """
    cluster = LocalCluster(root, parts=parts, serve_args=serve_args, env=env,
                           startup_timeout=startup_timeout, forwarding=forwarding)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def serve_part(root: str | os.PathLike, part: int, *, serve_args: Sequence[str] = (),
               env: Optional[dict[str, str]] = None,
               startup_timeout: float = STARTUP_TIMEOUT
               ) -> Iterator[tuple[subprocess.Popen, str]]:
    """Serves one part; yields its process and endpoint.

    The test may signal or kill the process; it is stopped on exit either way.
    """
    with serve_parts(root, [part], serve_args=serve_args, env=env,
                     startup_timeout=startup_timeout) as cluster:
        yield cluster.processes[0], cluster.endpoints[0]


def stop_process_tree(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stops ``proc`` and everything it started, also children that live in
    sessions of their own (servers, torchrun), which a plain ``kill`` of
    ``proc`` would orphan: SIGTERM to all, SIGKILL to what is left after
    ``grace`` seconds."""
    import psutil

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    proc.poll()


def run_process_tree(cmd: Sequence[str], timeout: float,
                     **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` that, when the
    command times out or the test is interrupted, stops everything the
    command started (see :func:`stop_process_tree`), not only the command."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            stop_process_tree(proc)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
