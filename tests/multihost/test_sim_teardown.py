"""The simulated hosts go away when the program that made them is sent
SIGTERM (a benchmark stopped with ``kill`` or ``timeout``), not only when it
returns or raises: no namespace, bridge or process in one is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.hosts import missing_requirements
from support.multihost import read_line

TESTS = Path(__file__).resolve().parents[1]


def _ip_list(*what: str) -> str:
    return subprocess.run(["ip", *what], capture_output=True, text=True, timeout=30).stdout


def _remove(netns: str, bridge: str) -> None:
    """What a failed run may have left: the namespace's processes, the
    namespace, the bridge."""
    for pid in _ip_list("netns", "pids", netns).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def test_sigterm_removes_the_hosts_and_their_processes(tmp_path: Path) -> None:
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "hold_hosts.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        from support.hosts import sim_network
        import support.hosts as hosts

        with sim_network(["solo"]) as (solo,):
            sleeper = solo.popen(["sleep", "600"])
            print("held", solo.netns, "pdb" + hosts._TAG, sleeper.pid, flush=True)
            time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    netns = bridge = ""
    try:
        _, netns, bridge, sleeper = read_line(proc, "held ", 60).split()
        assert netns in _ip_list("netns", "list")
        assert _ip_list("netns", "pids", netns).split(), "the sleeper runs in the namespace"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143  # unwound as SystemExit(143), not killed by the signal
        assert netns not in _ip_list("netns", "list")
        assert bridge not in _ip_list("link", "show")
        with pytest.raises(ProcessLookupError):
            os.kill(int(sleeper), 0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
        if netns:
            _remove(netns, bridge)
