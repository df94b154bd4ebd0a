"""``pyg-dist serve`` options checked before anything is loaded."""

from __future__ import annotations

import os

import pytest
import torch

from pyg_dist.cli import main


def test_threads_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:  # a usage error, before anything loads
        main(["serve", str(tmp_path), "--part", "0", "--threads", "0"])
    assert info.value.code == 2
    assert "--threads: must lie in [1, 4096], got 0" in capsys.readouterr().err


def test_threads_default_to_the_cores_per_worker():
    from pyg_dist.cli.serve import _set_threads

    before = torch.get_num_threads()
    try:
        _set_threads(None, workers=4)
        assert torch.get_num_threads() == max(1, (os.cpu_count() or 1) // 4)
        _set_threads(3, workers=4)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_threads_come_from_the_environment_when_not_given(monkeypatch):
    from pyg_dist.cli.serve import _set_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("PYG_DIST_THREADS", "2")
        _set_threads(None, workers=4)
        assert torch.get_num_threads() == 2
        _set_threads(1, workers=4)  # the option wins
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_bad_threads_variable_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYG_DIST_THREADS", "many")
    assert main(["serve", str(tmp_path), "--part", "0"]) == 1
    assert "PYG_DIST_THREADS must be an int" in capsys.readouterr().err
