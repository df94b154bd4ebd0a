"""glibc allocator tuning for big per-batch buffers (pyg_dist.malloc_tuning)."""

from __future__ import annotations

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
    assert env["MALLOC_TRIM_THRESHOLD_"] == "42"
