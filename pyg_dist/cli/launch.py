"""``pyg-dist launch``: serve every part on loopback and run a script under torchrun.

    pyg-dist launch ROOT --nproc 2 examples/train_sage_dist.py --epochs 50

It parses as torchrun does: ``launch [options] ROOT SCRIPT [ARGS]``, the
launcher's options anywhere before the script (before or after ROOT), the
script's own after it; a ``--`` before the script is accepted too. Each
mistake (no script, a script that does not exist, an unknown option) is one
line, before any server starts.

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
            "Launcher options go anywhere before SCRIPT, the script's own after it, as "
            "with torchrun. Example: pyg-dist launch parts/ --nproc 2 train.py --epochs 50"))
    p.add_argument("root", help="partitioned dataset directory (with meta.json)")
    _add_options(p)
    # REMAINDER: argparse's subparsers do not hand "--" on, so the options
    # after ROOT and the script come through here and are split in run().
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                   help="the training script and its arguments (a -- before it is optional)")
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
    p.add_argument("--quiet-ranks", action="store_true", default=_default(False),
                   help="show the output of rank 0 only (print, tqdm bars, warnings); "
                        "another rank's traceback is still shown when it fails (killed by a "
                        "signal: the end of its standard error)")


def split_command(args: argparse.Namespace) -> list[str]:
    """Separates launcher options given after ROOT from the script's command line.

    As torchrun: the first word that is not a launcher option (or the word
    after ``--``) is the script, and everything from there on is its
    command line. ``ROOT --nproc 2 train.py --lr 0.1`` arrives as
    ``command = ["--nproc", "2", "train.py", "--lr", "0.1"]``: the options
    are parsed into ``args``, ``["train.py", "--lr", "0.1"]`` is returned.

    Raises:
        PygDistError: one line naming the mistake: an unknown launcher
            option, an option without its value, or no script.
    """
    from pyg_dist.errors import PygDistError

    parser = _OptionParser(prog="pyg-dist launch", add_help=False)
    _add_options(parser, defaults=False)
    own, command = _launcher_words(list(args.command), parser)
    extra = parser.parse_args(own)
    if "serve_arg" in vars(extra):
        extra.serve_arg = list(args.serve_arg) + extra.serve_arg
    vars(args).update(vars(extra))
    if not command:
        raise PygDistError("no script given: pyg-dist launch [options] ROOT SCRIPT [ARGS], "
                           "e.g. pyg-dist launch parts/ --nproc 2 train.py")
    return command


class _OptionParser(argparse.ArgumentParser):
    """Launcher options after ROOT; a mistake is a typed error, one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from pyg_dist.errors import PygDistError

        raise PygDistError(f"{message} (launcher options go before the script, the "
                           f"script's own after it)")


def _launcher_words(words: list[str], parser: argparse.ArgumentParser
                    ) -> tuple[list[str], list[str]]:
    """``words`` cut where the script starts: (launcher options, command)."""
    takes_value = {opt: action.nargs != 0 for action in parser._actions
                   for opt in action.option_strings}
    at = 0
    while at < len(words):
        word = words[at]
        if word == "--":
            return words[:at], words[at + 1:]
        if not word.startswith("-") or word == "-":
            return words[:at], words[at:]
        name = word.split("=", 1)[0]
        if name in ("-h", "--help"):
            from pyg_dist.errors import PygDistError

            raise PygDistError("for the launcher's help put -h before ROOT: pyg-dist launch -h")
        if name not in takes_value:
            from pyg_dist.errors import PygDistError

            known = ", ".join(sorted(takes_value))
            raise PygDistError(f"unknown launcher option {word!r} before the script (known: "
                               f"{known}); the script's own options go after the script")
        at += 2 if takes_value[name] and "=" not in word else 1
    return words, []


def torchrun_command(nproc: int, command: list[str], quiet_ranks: bool = False) -> list[str]:
    """The torchrun invocation of ``command`` with ``nproc`` local ranks.

    torchrun runs through :mod:`pyg_dist.cli.trainers`, which ends a failed
    or interrupted job with one line instead of torchrun's tracebacks and,
    with ``quiet_ranks``, silences every rank but 0.
    """
    script = ["-m", "pyg_dist.cli.trainers", "--script"] if quiet_ranks else []
    return [sys.executable, "-m", "pyg_dist.cli.trainers", "--nproc-per-node", str(nproc),
            "--standalone", *script, *command]


def run(args: argparse.Namespace) -> int:
    """Runs ``pyg-dist launch``; returns torchrun's exit code."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.errors import PygDistError
    from pyg_dist.lifeline import exit_on_sigterm
    from pyg_dist.malloc_tuning import malloc_environment

    command = split_command(args)
    if args.nproc < 1:
        raise PygDistError(f"--nproc must be >= 1, got {args.nproc}")
    # The options first, as argparse would: then the script they run.
    startup_timeout = checked_seconds(args.startup_timeout, "--startup-timeout")
    if not os.path.isfile(command[0]):
        raise PygDistError(f"no such script: {command[0]} (pyg-dist launch [options] ROOT "
                           f"SCRIPT [ARGS]; the script is a Python file)")
    # SIGTERM (systemd, Kubernetes, Slurm) unwinds like Ctrl-C: the trainers
    # and the servers are stopped in order, and launch exits with 143.
    with exit_on_sigterm(), LocalCluster(args.root, serve_args=args.serve_arg,
                      startup_timeout=startup_timeout,
                      forwarding=not args.no_server_hops) as cluster:
        print(f"pyg-dist launch: {len(cluster.endpoints)} servers ready: "
              f"{','.join(cluster.endpoints)}", flush=True)
        env = malloc_environment(cluster.environment())
        return _run_trainers(torchrun_command(args.nproc, command, args.quiet_ranks), env)


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
