"""``pyg-dist launch`` parses as torchrun: ``launch [options] ROOT SCRIPT [ARGS]``.

Options go anywhere before the script (``--`` optional); every mistake is one
line before any server starts; ``--quiet-ranks`` leaves rank 0's output; a
failing rank ends with one line of ours, not torchrun's report.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

import pyg_dist
from pyg_dist.cli import build_parser, main
from pyg_dist.cli.launch import split_command
from pyg_dist.errors import PygDistError


def _parse(*words: str):
    args = build_parser().parse_args(["launch", *words])
    return args, split_command(args)


@pytest.mark.parametrize("words", [
    ("ROOT", "--nproc", "2", "train.py", "--nproc", "9"),
    ("--nproc", "2", "ROOT", "train.py", "--nproc", "9"),
    ("ROOT", "--nproc", "2", "--", "train.py", "--nproc", "9"),
    ("ROOT", "--nproc=2", "train.py", "--nproc", "9"),
])
def test_options_anywhere_before_the_script_the_rest_is_the_scripts(words):
    args, command = _parse(*words)
    assert (args.root, args.nproc) == ("ROOT", 2)
    assert command == ["train.py", "--nproc", "9"]


def test_every_launcher_option_after_root():
    args, command = _parse("ROOT", "--serve-arg=--workers", "--serve-arg", "2",
                           "--startup-timeout", "5", "--no-server-hops", "--quiet-ranks",
                           "t.py", "--quiet-ranks")
    assert args.serve_arg == ["--workers", "2"]
    assert (args.startup_timeout, args.no_server_hops, args.quiet_ranks) == (5.0, True, True)
    assert command == ["t.py", "--quiet-ranks"]


@pytest.mark.parametrize("words, message", [
    (("ROOT",), "no script given"),
    (("ROOT", "--nproc", "2"), "no script given"),
    (("ROOT", "--nproc", "2", "--"), "no script given"),
    (("ROOT", "--nproc"), "expected one argument"),
    (("ROOT", "--nprocs", "2", "t.py"), "unknown launcher option '--nprocs'"),
    (("ROOT", "--nproc", "two", "t.py"), "invalid int value"),
    (("ROOT", "-h"), "put -h before ROOT"),
])
def test_each_mistake_is_one_typed_error(words, message):
    with pytest.raises(PygDistError, match=message):
        _parse(*words)


def test_mistakes_are_one_line_before_any_server_starts(tmp_path, capsys):
    # tmp_path is no partition: reaching the servers would be another error.
    assert main(["launch", str(tmp_path), "--nproc", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pyg-dist launch: error: no script given") and err.count("\n") == 1
    assert main(["launch", str(tmp_path), "--nproc", "2", str(tmp_path / "nope.py")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pyg-dist launch: error: no such script: {tmp_path / 'nope.py'}")
    assert err.count("\n") == 1


def test_version():
    out = subprocess.run([sys.executable, "-m", "pyg_dist", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"pyg-dist {pyg_dist.__version__}"


RANKS = textwrap.dedent("""
    import os, sys, warnings
    rank = os.environ["RANK"]
    print(f"hello from rank {rank}", flush=True)
    warnings.warn(f"warning from rank {rank}")
    if sys.argv[1] == "fail" and rank == "1":
        raise ValueError("rank 1 breaks")
    if sys.argv[1] == "abort" and rank == "1":
        os.write(2, b"rank 1 is about to abort\\n")
        os.abort()
""")


@pytest.mark.slow
def test_quiet_ranks_leaves_rank_0_and_a_failure_is_one_line(cora2_root, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)

    def launch(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pyg_dist", "launch", str(cora2_root),
                               "--nproc", "2", "--quiet-ranks", str(script), mode],
                              capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))

    out = launch("ok")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "hello from rank 0" in out.stdout and "rank 1" not in out.stdout + out.stderr
    assert "warning from rank 0" in out.stderr
    out = launch("fail")
    assert out.returncode == 1
    # The failing rank's own traceback, then one line of ours; no torchrun report.
    assert "ValueError: rank 1 breaks" in out.stderr
    assert "pyg-dist launch: rank 1 failed (exit code 1); its output is above" in out.stderr
    assert "ChildFailedError" not in out.stderr and "hello from rank 1" not in out.stdout
    # A rank killed by a signal writes no traceback: the launcher shows the
    # end of the standard error it silenced, and removes where it kept it.
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "pyg-dist-ranks-*")))
    out = launch("abort")
    assert out.returncode == 1
    assert "pyg-dist launch: rank 1 failed (signal SIGABRT); the last lines of its standard " \
        "error:\n" in out.stderr
    assert "rank 1 is about to abort" in out.stderr and "warning from rank 1" in out.stderr
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "pyg-dist-ranks-*"))) <= before
