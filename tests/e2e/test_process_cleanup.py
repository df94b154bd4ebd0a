"""Test support: a failed test stops every process it started, also children
in sessions of their own (as launch starts servers and torchrun)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from support.servers import run_process_tree

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_a_timed_out_command_leaves_no_child_behind(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    before = {p.pid for p in psutil.process_iter()}
    with pytest.raises(subprocess.TimeoutExpired):
        run_process_tree([sys.executable, str(script)], timeout=5)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        new = [p for p in psutil.process_iter(["cmdline"])
               if p.pid not in before and p.info["cmdline"]
               and "time.sleep(600)" in " ".join(p.info["cmdline"])]
        if not new:
            break
        time.sleep(0.2)
    assert not new, [p.pid for p in new]
