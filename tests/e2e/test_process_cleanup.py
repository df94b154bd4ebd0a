"""Test support: a failed test stops every process it started, also children
in sessions of their own (as launch starts servers and torchrun)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psutil
import pytest
from support.servers import run_process_tree
from support.waiting import wait_until

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)  # still running at the timeout, as its child
""")


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs the child (exited, a zombie, or the
    pid reused by another program)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() == psutil.STATUS_ZOMBIE or "time.sleep(600)" not in \
            " ".join(proc.cmdline())
    except psutil.NoSuchProcess:
        return True


def test_a_timed_out_command_leaves_no_child_behind(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run_process_tree([sys.executable, str(script)], timeout=5)
    # The child ran (else there was nothing to clean up and the test could
    # not fail): the parent printed its pid before the timeout.
    printed = (timed_out.value.output or b"").split()
    assert printed, "the parent did not start its child within the 5 s timeout"
    child = int(printed[0])
    try:
        wait_until(lambda: _gone(child), 15, f"the child in its own session (pid {child}) to end")
    finally:
        if not _gone(child):  # the test failed: leave no process behind
            psutil.Process(child).kill()
