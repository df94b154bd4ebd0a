"""Start and stop one partition server process per part on this machine.

:class:`LocalCluster` is what ``pyg-dist launch`` and ``pyg-dist bench`` use
(and the end-to-end tests): it runs ``python -m pyg_dist serve ROOT --part K``
for every part, binding port 0 on loopback, reads each server's
``ready <endpoint>`` line within a deadline. Leaving the ``with`` block, an exception,
Ctrl-C or SIGTERM (which unwinds the main thread as ``SystemExit(143)`` while
the cluster runs, unless the program has a SIGTERM handler of its own) stops
every process it started: SIGTERM first, SIGKILL after a grace period. A
parent that dies without cleaning up (SIGKILL) leaves no server either: each
watches a :class:`~pyg_dist.lifeline.Lifeline` and stops within seconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, NamedTuple, Optional

from pyg_dist.errors import PartitionFormatError, PygDistError, ServerUnavailableError
from pyg_dist.lifeline import Lifeline, exit_on_sigterm

logger = logging.getLogger(__name__)

SERVERS_ENV = "PYG_DIST_SERVERS"
"""Environment variable holding the comma-separated server endpoints, ordered
by part; :func:`pyg_dist.connect` reads it when given no addresses."""


def num_parts_of(root: str | os.PathLike) -> int:
    """Reads the number of parts from ``ROOT/meta.json`` without loading data."""
    meta = Path(root) / "meta.json"
    try:
        return int(json.loads(meta.read_text())["num_parts"])
    except FileNotFoundError as exc:
        raise PartitionFormatError(
            f"{meta} not found: is {root} a partitioned dataset? "
            f"Create one with 'pyg-dist partition'") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise PartitionFormatError(f"{meta} is not a valid pyg-dist meta.json: {exc}") from exc


class StoppedProcess(NamedTuple):
    """How one process of a :class:`LocalCluster` ended in :meth:`~LocalCluster.stop`."""

    pid: int
    returncode: Optional[int]
    """Its exit status (negative: the signal that ended it), ``None`` if it
    could not be reaped."""
    killed: bool
    """Whether it had to be SIGKILLed: it did not stop within the grace
    period after SIGTERM."""


def _read_ready(proc: subprocess.Popen, what: str, deadline: float) -> list[str]:
    """Waits for the ``ready <endpoint> ...`` line of ``proc``'s stdout."""
    result: list[str] = []
    stdout: IO[str] = proc.stdout  # type: ignore[assignment]

    def read() -> None:
        for line in stdout:
            if line.startswith("ready "):
                result.extend(line.split()[1:])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    if not result:
        code = proc.poll()
        state = f"exited with code {code}" if code is not None else "did not report ready"
        raise ServerUnavailableError(
            f"{what} {state} within the start-up deadline; run the same command by hand "
            f"to see its error: {' '.join(proc.args)}")  # type: ignore[arg-type]
    return result


class LocalCluster:
    """One ``pyg-dist serve`` process per part on loopback.

    Args:
        root: The partitioned dataset (a directory with ``meta.json``).
        parts: Which parts to serve; all of them if ``None``.
        host: Address to bind; loopback by default.
        serve_args: Extra arguments for ``pyg-dist serve`` (e.g.
            ``["--feature-store", "mmap"]``).
        startup_timeout: Seconds to wait for every ``ready`` line.
        stop_grace: Seconds between SIGTERM and SIGKILL on shutdown.
        env: Environment for the server processes (default: this one's).
        forwarding: Let the servers carry a batch's hops among themselves
            (``sample_tree``): each is started with ``--peers-file``, and the
            file is written once every server is ready.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        parts: Optional[Sequence[int]] = None,
        host: str = "127.0.0.1",
        serve_args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        stop_grace: float = 5.0,
        env: Optional[dict[str, str]] = None,
        forwarding: bool = False,
    ) -> None:
        self.root = str(root)
        self.parts = list(parts) if parts is not None else list(range(num_parts_of(root)))
        self.host = host
        self.serve_args = list(serve_args)
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.env = env
        self.processes: list[subprocess.Popen] = []
        self.stopped: list[StoppedProcess] = []
        """What the last :meth:`stop` saw of each process it stopped."""
        self.server_endpoints: list[str] = []
        self.endpoints: list[str] = []
        self.forwarding = forwarding
        self._peers_dir: Optional[tempfile.TemporaryDirectory] = None
        self._lifeline: Optional[Lifeline] = None
        self._on_sigterm = contextlib.ExitStack()

    @property
    def peers_file(self) -> Optional[Path]:
        """The file the servers read their peers from (``forwarding``)."""
        return None if self._peers_dir is None else Path(self._peers_dir.name) / "servers"

    def start(self) -> list[str]:
        """Starts every server and returns the endpoints clients should use,
        ordered by part."""
        try:
            self._on_sigterm.enter_context(exit_on_sigterm())
            deadline = time.monotonic() + self.startup_timeout
            if self.forwarding:
                self._peers_dir = tempfile.TemporaryDirectory(prefix="pyg-dist-peers-")
            self._lifeline = lifeline = Lifeline()
            servers = [self._spawn(self._serve_cmd(k), f"server for part {k}", lifeline)
                       for k in self.parts]
            lifeline.children_started()
            for k, proc in zip(self.parts, servers):
                self.server_endpoints += _read_ready(proc, f"server for part {k}", deadline)
            self.endpoints = list(self.server_endpoints)
            if self.peers_file is not None:
                self.set_peers(self.endpoints)
            logger.info("cluster ready: %s", ", ".join(self.endpoints))
            return self.endpoints
        except BaseException:
            self.stop()
            raise

    def set_peers(self, endpoints: Sequence[str]) -> None:
        """Writes the servers' peer list (``forwarding``), which each reads
        on its first ``sample_tree``: by default their own endpoints; a
        benchmark may name proxies in front of them instead.

        Raises:
            PygDistError: if the cluster does not forward.
        """
        if self.peers_file is None:
            raise PygDistError("this cluster was started without forwarding=True: its "
                               "servers read no peer list")
        # Written whole, then renamed: a server never reads half of it.
        partial = self.peers_file.with_suffix(".partial")
        partial.write_text("\n".join(endpoints) + "\n")
        partial.rename(self.peers_file)

    def _serve_cmd(self, part: int) -> list[str]:
        peers = [] if self.peers_file is None else ["--peers-file", str(self.peers_file)]
        return [sys.executable, "-m", "pyg_dist", "serve", self.root, "--part", str(part),
                "--bind", f"tcp://{self.host}:0", *peers, *self.serve_args]

    def _spawn(self, cmd: list[str], what: str, lifeline: Lifeline) -> subprocess.Popen:
        logger.debug("starting %s: %s", what, " ".join(cmd))
        # start_new_session: Ctrl-C in a terminal reaches us, not the servers
        # directly, so shutdown happens in one place and in order.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                env=lifeline.child_environment(self.env),
                                pass_fds=lifeline.pass_fds, start_new_session=True)
        self.processes.append(proc)
        return proc

    def stop(self) -> None:
        """Stops every process started: SIGTERM, then SIGKILL after the grace
        period. Safe to call twice."""
        # A second SIGTERM while stopping kills this process at once; the
        # servers then stop on their lifeline.
        self._on_sigterm.close()
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        stopped = []
        for proc in self.processes:
            killed = False
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("process %d did not stop on SIGTERM; killing it", proc.pid)
                killed = True
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
            stopped.append(StoppedProcess(proc.pid, proc.returncode, killed))
        if stopped:
            self.stopped = stopped
        self.processes = []
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
        if self._peers_dir is not None:
            self._peers_dir.cleanup()
            self._peers_dir = None

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def environment(self) -> dict[str, str]:
        """This process's environment plus ``PYG_DIST_SERVERS``."""
        env = dict(os.environ)
        env[SERVERS_ENV] = ",".join(self.endpoints)
        return env
