"""Running the examples in end-to-end tests: paths, ``pyg-dist launch``
command lines, the figures they print, and importing their helper modules."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def launch_command(root: str, nproc: int, *command: str) -> list[str]:
    """``python -m pyg_dist launch ROOT --nproc N -- COMMAND...``."""
    return [sys.executable, "-m", "pyg_dist", "launch", root, "--nproc", str(nproc), "--",
            *command]


def printed_value(name: str, output: str) -> float:
    """The last ``name=<float>`` line an example printed (fails showing the
    output's tail when there is none)."""
    found = re.findall(rf"^{name}=([-0-9.e]+)$", output, flags=re.M)
    assert found, output[-3000:]
    return float(found[-1])


def example_module(name: str) -> ModuleType:
    """Imports ``examples/NAME.py`` (a split or dataset helper of the examples)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))
