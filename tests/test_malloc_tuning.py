"""glibc allocator tuning for big per-batch buffers (pyg_dist.malloc_tuning)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from pyg_dist import malloc_tuning

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="needs glibc")


@glibc_only
def test_tuning_is_applied_by_glibc_in_a_fresh_process():
    code = "from pyg_dist.malloc_tuning import tune_malloc; print(tune_malloc())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "True"


def test_switched_off_it_does_nothing(monkeypatch):
    monkeypatch.setenv(malloc_tuning.ENV_SWITCH, "0")
    assert malloc_tuning.tune_malloc() is False
    assert malloc_tuning.malloc_environment({"A": "1"}) == {"A": "1"}


def test_child_environment_gets_the_same_settings_without_overriding_the_users(monkeypatch):
    monkeypatch.delenv(malloc_tuning.ENV_SWITCH, raising=False)
    env = malloc_tuning.malloc_environment({"MALLOC_TRIM_THRESHOLD_": "42"})
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(malloc_tuning.MMAP_THRESHOLD)
    assert env["MALLOC_ARENA_MAX"] == "1"
    assert env["MALLOC_TRIM_THRESHOLD_"] == "42"


_FREED_BACK = """
import os, sys, psutil, torch, pyg_dist
tune = {"default": None, "on": True, "off": False}[sys.argv[2]]
kwargs = {} if tune is None else {"tune_malloc": tune}
fs, gs = pyg_dist.connect(sys.argv[1].split(","), **kwargs)
fs.close()
proc = psutil.Process()
x = torch.ones(64 << 18)  # 64 MiB, touched
before = proc.memory_info().rss
del x
print((before - proc.memory_info().rss) >> 20)  # MiB handed back to the kernel on free
"""


@pytest.fixture(scope="module")
def tiny_cluster(tmp_path_factory):
    """A 200-node graph in 2 parts, served for this module's trainers."""
    from support.servers import serve_parts

    from pyg_dist.datasets import fake
    from pyg_dist.partitioning.writer import partition

    root = tmp_path_factory.mktemp("malloc") / "parts"
    partition(fake(num_nodes=200, num_channels=4), 2, root, partitioner="random", progress=False)
    with serve_parts(root) as cluster:
        yield cluster


@glibc_only
@pytest.mark.parametrize("switch, option, tuned", [
    ("1", "default", True),   # the documented default: connect() tunes
    ("0", "default", False),  # PYG_DIST_TUNE_MALLOC=0 still opts out
    ("1", "off", False),      # connect(tune_malloc=False) leaves malloc alone
    ("0", "on", True),        # connect(tune_malloc=True) tunes whatever the variable says
], ids=["env-on", "env-off", "arg-off", "arg-on"])
def test_a_trainer_that_connects_keeps_freed_batch_buffers(tiny_cluster, monkeypatch, switch,
                                                           option, tuned):
    # What the tuning changes, seen from outside: a freed 64 MiB tensor stays
    # in the heap for the next batch instead of going back to the kernel.
    monkeypatch.setenv(malloc_tuning.ENV_SWITCH, switch)
    out = subprocess.run([sys.executable, "-c", _FREED_BACK, ",".join(tiny_cluster.endpoints),
                          option], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    returned = int(out.stdout.split()[-1])
    assert returned < 8 if tuned else returned > 56, returned


@glibc_only
@pytest.mark.parametrize("enabled, switch, applied", [(True, "0", True), (False, "1", False)])
def test_an_explicit_choice_wins_over_the_environment(enabled, switch, applied):
    code = (f"from pyg_dist.malloc_tuning import tune_malloc; "
            f"print(tune_malloc({enabled}))")
    env = {**os.environ, malloc_tuning.ENV_SWITCH: switch}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120, env=env)
    assert out.stdout.strip() == str(applied)


_ARENAS = """
import ctypes, sys, threading, torch
from pyg_dist.malloc_tuning import tune_malloc
assert tune_malloc() == (sys.argv[1] == "1")
kept = []
def worker():  # allocates from its own arena unless there is only one
    kept.append(torch.ones(1 << 20))
thread = threading.Thread(target=worker)
thread.start()
thread.join()
sys.stderr.flush()
ctypes.CDLL(None).malloc_stats()  # glibc prints one "Arena N:" block per arena
"""


@glibc_only
@pytest.mark.parametrize("single", ["1", "0"], ids=["tuned", "switched-off"])
def test_tuned_processes_make_their_threads_share_one_arena(single, monkeypatch):
    monkeypatch.setenv(malloc_tuning.ENV_SWITCH, single)
    out = subprocess.run([sys.executable, "-c", _ARENAS, single],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    arenas = [line for line in out.stderr.splitlines() if line.startswith("Arena ")]
    assert (len(arenas) == 1) if single == "1" else (len(arenas) > 1), out.stderr


_LATE = """
import ctypes, logging, sys, threading, torch
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
kept = []
def worker():
    kept.append(torch.ones(1 << 20))
early = threading.Thread(target=worker)  # allocates before the tuning: its own arena
early.start()
early.join()
from pyg_dist.malloc_tuning import tune_malloc
assert tune_malloc(True)
assert tune_malloc(True)  # told once
sys.stdout.flush()
ctypes.CDLL(None).malloc_stats()
"""


@glibc_only
@pytest.mark.parametrize("from_start", [False, True], ids=["late", "environment"])
def test_a_tuning_that_comes_too_late_says_so_once(from_start, monkeypatch):
    # A thread that allocated before the tuning keeps its own arena: the
    # process is told how to get one arena (MALLOC_ARENA_MAX=1 from the
    # start, as pyg-dist launch sets it), which then holds.
    if from_start:
        monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    else:
        monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    out = subprocess.run([sys.executable, "-c", _LATE], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    told = [line for line in out.stdout.splitlines() if "MALLOC_ARENA_MAX=1" in line]
    arenas = [line for line in out.stderr.splitlines() if line.startswith("Arena ")]
    if from_start:
        assert not told and len(arenas) == 1, (out.stdout, out.stderr)
    else:
        assert len(told) == 1 and len(arenas) > 1, (out.stdout, out.stderr)
