"""``pyg-dist plugins``: every registered plugin, its group and its distribution."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist plugins``."""
    p = sub.add_parser(
        "plugins", help="list the installed partitioner and store plugins",
        description=(
            "Lists every plugin registered through entry points (groups "
            "pyg_dist.partitioners, pyg_dist.feature_stores, pyg_dist.graph_stores, "
            "pyg_dist.cache_policies, pyg_dist.commands) with "
            "the module it points at and the distribution that installed it. Nothing is "
            "imported: a plugin that fails to import is still listed."))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints one line per plugin."""
    from pyg_dist.plugins import default_registry

    found = default_registry.found()
    rows = [("group", "name", "points at", "distribution")]
    rows += [(p.group, p.name, p.value, f"{p.distribution} {p.version}") for p in found]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not found:
        print("no plugins installed; reinstall pyg-dist")
    return 0
