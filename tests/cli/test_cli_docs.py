"""docs/cli.md stays true to the code: every command and option is documented."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyg_dist.cli import COMMANDS, build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_every_command_and_option_is_in_docs_cli():
    text = DOC.read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    # bench: the benchmarks package's sub-command (or its stand-in).
    assert sorted(sub.choices) == sorted((*COMMANDS, "bench"))
    missing = []
    for name, p in sub.choices.items():
        if f"## `pyg-dist {name}`" not in text:
            missing.append(name)
        for action in p._actions:
            missing += [f"{name} {o}" for o in action.option_strings if o not in text]
    assert not missing, f"regenerate docs/cli.md (see its header); missing: {missing}"
