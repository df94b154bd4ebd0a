"""``pyg-dist launch``: serve every part on loopback and run a script under torchrun.

    pyg-dist launch ROOT --nproc 2 -- examples/train_sage_dist.py --epochs 50

starts one ``pyg-dist serve`` process per part of ``ROOT`` on 127.0.0.1
(port 0), waits until every server has printed ``ready``, then runs
``python -m torch.distributed.run --nproc-per-node N --standalone`` on the
script with ``PYG_DIST_SERVERS`` (comma-separated endpoints, ordered by part)
in its environment, so that ``pyg_dist.connect()`` needs no arguments.
Servers and trainers are stopped when the script exits, on an error, on
Ctrl-C and on SIGTERM. The exit code is torchrun's: 0 when every rank
succeeded, 1 when one failed (torchrun does not pass a rank's own code on),
130 after Ctrl-C, 143 after SIGTERM. If launch itself dies without cleaning
up (SIGKILL), torchrun gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``)
and the servers stop on their lifeline (``pyg_dist/lifeline.py``).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import subprocess
import sys
from typing import Any

logger = logging.getLogger(__name__)

# How long torchrun gets to stop its workers after SIGTERM before SIGKILL.
_TRAINER_STOP_GRACE_S = 15.0


def add_parser(subparsers: Any) -> None:
    """Registers ``pyg-dist launch``."""
    p = subparsers.add_parser(
        "launch", help="serve all parts locally and run a training script under torchrun",
        description=(
            "Start one partition server per part of ROOT on loopback, wait until all are "
            "ready, and run SCRIPT under torchrun with PYG_DIST_SERVERS set. Everything is "
            "torn down when the script exits or on Ctrl-C. The trainers get glibc's "
            "MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ and MALLOC_ARENA_MAX so that "
            "per-batch buffers are reused (PYG_DIST_TUNE_MALLOC=0 leaves them alone; "
            "docs/performance.md). The servers know each other and sample a batch's hops "
            "among themselves (sample_tree: one round trip for a trainer's subgraph instead "
            "of one per hop; --no-server-hops turns that off). "
            "Example: pyg-dist launch parts/ --nproc 2 -- train.py --epochs 50"))
    p.add_argument("root", help="partitioned dataset directory (with meta.json)")
    _add_options(p)
    # REMAINDER: argparse's subparsers do not hand "--" on, so the options
    # after ROOT and the script come through here and are split in run().
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- SCRIPT [ARGS]",
                   help="the training script and its arguments, after --")
    p.set_defaults(run=run)


def _add_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    def _default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--nproc", type=int, default=_default(1),
                   help="trainer processes (torchrun --nproc-per-node; default 1)")
    p.add_argument("--serve-arg", action="append", default=_default([]), metavar="ARG",
                   help="extra argument for every 'pyg-dist serve' (repeatable), e.g. "
                        "--serve-arg=--feature-store --serve-arg=mmap")
    p.add_argument("--startup-timeout", type=float, default=_default(120.0),
                   help="seconds to wait for every server's ready line (default 120)")
    p.add_argument("--no-server-hops", action="store_true", default=_default(False),
                   help="do not give the servers their peer list: every hop of a batch "
                        "goes back to the trainer, as before sample_tree")


def split_command(args: argparse.Namespace) -> list[str]:
    """Separates launcher options given after ROOT from the script's command line.

    ``ROOT --nproc 2 -- train.py --lr 0.1`` arrives as ``command = ["--nproc",
    "2", "--", "train.py", "--lr", "0.1"]``: the part before ``--`` is parsed
    into ``args``, the part after is returned.
    """
    command = list(args.command)
    if "--" in command:
        cut = command.index("--")
        own, command = command[:cut], command[cut + 1:]
        parser = argparse.ArgumentParser(prog="pyg-dist launch", add_help=False)
        _add_options(parser, defaults=False)
        extra = parser.parse_args(own)
        if "serve_arg" in vars(extra):
            extra.serve_arg = list(args.serve_arg) + extra.serve_arg
        vars(args).update(vars(extra))
    return command


def torchrun_command(nproc: int, command: list[str]) -> list[str]:
    """The torchrun invocation of ``command`` with ``nproc`` local ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--standalone", *command]


def run(args: argparse.Namespace) -> int:
    """Runs ``pyg-dist launch``; returns torchrun's exit code."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.errors import PygDistError
    from pyg_dist.lifeline import exit_on_sigterm
    from pyg_dist.malloc_tuning import malloc_environment

    command = split_command(args)
    if not command:
        raise PygDistError("no script given: pyg-dist launch ROOT --nproc N -- SCRIPT [ARGS]")
    if args.nproc < 1:
        raise PygDistError(f"--nproc must be >= 1, got {args.nproc}")
    startup_timeout = checked_seconds(args.startup_timeout, "--startup-timeout")
    # SIGTERM (systemd, Kubernetes, Slurm) unwinds like Ctrl-C: the trainers
    # and the servers are stopped in order, and launch exits with 143.
    with exit_on_sigterm(), LocalCluster(args.root, serve_args=args.serve_arg,
                      startup_timeout=startup_timeout,
                      forwarding=not args.no_server_hops) as cluster:
        print(f"pyg-dist launch: {len(cluster.endpoints)} servers ready: "
              f"{','.join(cluster.endpoints)}", flush=True)
        env = malloc_environment(cluster.environment())
        return _run_trainers(torchrun_command(args.nproc, command), env)


# A start-up deadline beyond a day is a typo (and inf overflows the waits).
_MAX_SECONDS = 86400.0


def checked_seconds(value: float, option: str) -> float:
    """``value`` if it is a finite number of seconds in ``(0, 86400]``.

    Raises:
        PygDistError: naming the option and the value (one line on the CLI).
    """
    from pyg_dist.errors import PygDistError

    if not (math.isfinite(value) and 0 < value <= _MAX_SECONDS):
        raise PygDistError(f"{option} must be a number of seconds in (0, {_MAX_SECONDS:g}], "
                           f"got {value!r}")
    return value


def _run_trainers(cmd: list[str], env: dict[str, str]) -> int:
    from pyg_dist.lifeline import SIGTERM_EXIT_CODE, die_with_parent_preexec

    logger.info("running %s", " ".join(cmd))
    # Own session: a Ctrl-C reaches this process only, which then stops the
    # trainers and the servers in order instead of everything at once.
    # torchrun gets SIGTERM if launch dies without stopping it (SIGKILL).
    proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                            preexec_fn=die_with_parent_preexec())
    try:
        return proc.wait()
    except (KeyboardInterrupt, SystemExit) as exc:
        if isinstance(exc, SystemExit) and exc.code != SIGTERM_EXIT_CODE:
            raise
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        print(f"pyg-dist launch: {what}, stopping trainers and servers", file=sys.stderr)
        _stop(proc)
        return 130 if isinstance(exc, KeyboardInterrupt) else SIGTERM_EXIT_CODE
    finally:
        if proc.poll() is None:
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun (it forwards to its workers), SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(_TRAINER_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        logger.warning("torchrun did not stop on SIGTERM; killing its process group")
        try:
            # The group is the session started for torchrun: it and its workers.
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)
