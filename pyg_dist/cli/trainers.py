"""The trainer side of ``pyg-dist launch``: torchrun without its tracebacks.

``python -m pyg_dist.cli.trainers TORCHRUN_ARGS`` runs torchrun's own
``run`` (not its ``main``, whose error recorder re-raises), so that the two
ways a launched job normally ends print one line of ours instead of
torchrun's: a rank that failed (its own traceback is already on stderr,
above; torchrun's ``ChildFailedError`` report would repeat it in a 30-line
box) and a stop signal from the launcher after Ctrl-C (torchrun's
``SignalException`` traceback).

``--quiet-ranks`` starts every rank through :func:`run_script` (torchrun's
``-m pyg_dist.cli.trainers --script SCRIPT ARGS``): ranks other than 0 then
write nothing (``print``, tqdm bars, warnings), except the traceback that
ends a failing rank, so that a script's output reads as one process's. A
rank killed by a signal writes no traceback (a native abort, a crash): its
standard error went to a file of this launch (removed at the end), whose
last lines are shown instead.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
import traceback
from typing import Optional

# Exit codes: as launch's (0, 1 when a rank failed, 130 after Ctrl-C).
_INTERRUPTED = 130
# Lines of a rank's own standard error shown when a signal killed it.
_TAIL_LINES = 30
_TAIL_BYTES = 16 << 10


def run_torchrun(argv: list[str]) -> int:
    """Runs torchrun on ``argv``; returns 0, 1 (a rank failed) or 130 (stopped)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    logs = None
    at = _quiet_script_at(argv)
    if at is not None:  # quiet ranks: their standard error goes to files here
        logs = tempfile.mkdtemp(prefix="pyg-dist-ranks-")
        argv = [*argv[:at], "--stderr-dir", logs, *argv[at:]]
    try:
        run(parse_args(argv))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode < 0:
            tail = _stderr_tail(logs, rank)
            how = f"signal {failure.signal_name()}"
            where = f"the last lines of its standard error:\n{tail}" if tail else \
                "its output is above"
        else:
            how, where = f"exit code {failure.exitcode}", "its output is above"
        print(f"pyg-dist launch: rank {rank} failed ({how}); {where}",
              file=sys.stderr, flush=True)
        return 1
    except SignalException:
        return _INTERRUPTED
    except KeyboardInterrupt:
        return _INTERRUPTED
    finally:
        if logs is not None:
            shutil.rmtree(logs, ignore_errors=True)
    return 0


def _quiet_script_at(argv: list[str]) -> Optional[int]:
    """Where the script's own arguments start in a quiet-ranks torchrun
    command (after ``-m pyg_dist.cli.trainers --script``), else ``None``."""
    marker = ["-m", "pyg_dist.cli.trainers", "--script"]  # as launch.torchrun_command
    for i in range(len(argv) - 2):
        if argv[i:i + 3] == marker:
            return i + 3
    return None


def _stderr_tail(logs: Optional[str], rank: int) -> str:
    """The last lines a quiet rank wrote to standard error ("" if none)."""
    if logs is None:
        return ""
    try:
        with open(os.path.join(logs, f"rank-{rank}.stderr"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    # Progress bars redraw with carriage returns: keep each line's last state.
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join([line for line in lines if line.strip()][-_TAIL_LINES:])


def run_script(argv: list[str], stderr_dir: Optional[str] = None) -> None:
    """Runs ``SCRIPT ARGS`` as ``python SCRIPT ARGS`` would, silencing
    ranks other than 0 (``RANK`` from torchrun) but for a final traceback.

    Args:
        argv: ``SCRIPT ARGS``.
        stderr_dir: Where a silenced rank's standard error goes
            (``rank-R.stderr``), for the launcher to show when a signal
            kills the rank; ``None``: nowhere.
    """
    script = argv[0]
    rank = os.environ.get("RANK", "0")
    stderr_fd: Optional[int] = None
    if rank != "0":
        sys.stdout.flush()
        sys.stderr.flush()
        stderr_fd = os.dup(2)  # kept for the traceback of a failure
        devnull = os.open(os.devnull, os.O_WRONLY)
        errors = devnull if stderr_dir is None else os.open(
            os.path.join(stderr_dir, f"rank-{rank}.stderr"),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(devnull, 1)
        os.dup2(errors, 2)
        os.close(devnull)
        if errors != devnull:
            os.close(errors)
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException:
        if stderr_fd is not None:
            text = f"[rank {rank}] " + traceback.format_exc()
            os.write(stderr_fd, text.encode("utf-8", "replace"))
        raise


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m pyg_dist.cli.trainers``: torchrun, or one rank with ``--script``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--script":
        if argv[1:2] == ["--stderr-dir"]:
            run_script(argv[3:], stderr_dir=argv[2])
        else:
            run_script(argv[1:])
        return 0
    return run_torchrun(argv)


if __name__ == "__main__":
    sys.exit(main())
