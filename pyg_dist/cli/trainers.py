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
ends a failing rank, so that a script's output reads as one process's.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Optional

# Exit codes: as launch's (0, 1 when a rank failed, 130 after Ctrl-C).
_INTERRUPTED = 130


def run_torchrun(argv: list[str]) -> int:
    """Runs torchrun on ``argv``; returns 0, 1 (a rank failed) or 130 (stopped)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 \
            else f"exit code {failure.exitcode}"
        print(f"pyg-dist launch: rank {rank} failed ({how}); its output is above",
              file=sys.stderr, flush=True)
        return 1
    except SignalException:
        return _INTERRUPTED
    except KeyboardInterrupt:
        return _INTERRUPTED
    return 0


def run_script(argv: list[str]) -> None:
    """Runs ``SCRIPT ARGS`` as ``python SCRIPT ARGS`` would, silencing
    ranks other than 0 (``RANK`` from torchrun) but for a final traceback."""
    script = argv[0]
    rank = os.environ.get("RANK", "0")
    stderr_fd: Optional[int] = None
    if rank != "0":
        sys.stdout.flush()
        sys.stderr.flush()
        stderr_fd = os.dup(2)  # kept for the traceback of a failure
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
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
        run_script(argv[1:])
        return 0
    return run_torchrun(argv)


if __name__ == "__main__":
    sys.exit(main())
