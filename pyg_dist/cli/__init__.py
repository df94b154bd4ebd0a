"""The ``pyg-dist`` command line.

Each sub-command lives in its own module of this package and exposes
``add_parser(subparsers)`` and ``run(args) -> int``. Modules import torch and
friends inside ``run`` only, so ``pyg-dist --help`` answers instantly.

Other distributions add sub-commands through the ``pyg_dist.commands``
entry-point group, found by the plugin registry like any plugin: the
benchmarks package (``pip install -e benchmarks/`` in a checkout) adds
``bench``. Without it, ``pyg-dist bench`` is a stand-in that names that
install command, so the library never imports its harness.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Optional

from pyg_dist import __version__
from pyg_dist.errors import PluginLoadError, PygDistError

# Order shown in --help: the user's journey from raw graph to training.
COMMANDS = ("partition", "info", "plugins", "serve", "launch", "keys")

BENCH_INSTALL = "pip install -e benchmarks/"
"""How the benchmarks package that adds ``pyg-dist bench`` is installed, in a
pyg-dist checkout (it is not on any index)."""


def _available_commands() -> list:
    modules = []
    for name in COMMANDS:
        try:
            modules.append(importlib.import_module(f"pyg_dist.cli.{name}"))
        except ModuleNotFoundError as exc:
            # Only a command that is not written yet may be absent; a broken
            # import inside a command must surface.
            if exc.name != f"pyg_dist.cli.{name}":
                raise
    return modules


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Sub-commands registered by other distributions. One that fails to load
    must not break the other commands: it becomes a stand-in that reports the
    failure when run (``bench``: with its install command, also when absent)."""
    from pyg_dist.plugins import COMMANDS as GROUP, default_registry

    names = default_registry.names(GROUP)
    for name in names:
        try:
            command = default_registry.get(GROUP, name)
        except PluginLoadError as exc:
            _add_stand_in(sub, name, exc)
            continue
        command.add_parser(sub)
    if "bench" not in names:
        _add_stand_in(sub, "bench", None)


def _add_stand_in(sub: argparse._SubParsersAction, name: str,
                  failure: Optional[PluginLoadError]) -> None:
    if name == "bench":
        why = "which is not installed" if failure is None else f"which failed to load ({failure})"
        message = (f"pyg-dist bench comes with pyg-dist's benchmarks package (pyg_dist_bench), "
                   f"{why}; in a pyg-dist checkout run: {BENCH_INSTALL}")
        help_text = "benchmark pyg-dist (needs pyg-dist's benchmarks package)"
    else:
        message = f"{failure}; reinstall the distribution that provides it"
        help_text = "(failed to load: run it for the reason)"
    p = sub.add_parser(name, help=help_text, description=message)

    def run(args: argparse.Namespace) -> int:
        raise PygDistError(message)

    p.set_defaults(run=run, takes_any_arguments=True)


def build_parser() -> argparse.ArgumentParser:
    """Builds the top-level parser with every sub-command attached."""
    parser = argparse.ArgumentParser(
        prog="pyg-dist",
        description=(
            "Distributed neighbour sampling for PyTorch Geometric. Partition "
            "a graph once, serve one partition per server, and train with "
            "DistNeighborLoader under torchrun."),
    )
    parser.add_argument(
        "--version", action="version", version=f"pyg-dist {__version__}",
        help="print the version and exit")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="more log output (-v: info, -vv: debug)")
    # Not "command": launch has a positional of that name (the script).
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    for module in _available_commands():
        module.add_parser(sub)
    _add_plugin_commands(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``pyg-dist`` console script."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "takes_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if not getattr(args, "subcommand", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (PygDistError, OSError) as exc:
        # Expected failures: a typed error, or the system refusing a file
        # or socket operation. One line, no traceback.
        _error(args.subcommand, _one_line(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        # A bug: still one line for the user, the traceback under -vv.
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        _error(args.subcommand, f"unexpected {type(exc).__name__}: {_one_line(exc)} (this is "
                             f"a bug in pyg-dist; run with -vv for the traceback and "
                             f"report it)")
        return 1


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line, bounded in length."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:2000] + "..."


def _error(command: str, message: str) -> None:
    print(f"pyg-dist {command}: error: {message}", file=sys.stderr, flush=True)
