"""A process spinning on a core while a test stops servers (what a busy
host does to their shutdown)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def cpu_hog() -> Iterator[subprocess.Popen]:
    """The spinning process; killed and reaped after the test, failed or not."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait(30)
