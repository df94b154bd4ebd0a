"""Suite-wide pytest configuration.

A run in which no test executed (all skipped, or none collected) fails: a
green CI must mean that tests ran.
"""

from __future__ import annotations

import pytest
from support.cpu_hog import cpu_hog  # noqa: F401 (the shutdown-under-load tests')

# Session-wide so that the loader and sampler tests share one set of server
# processes per part count.
from support.served_cora import (  # noqa: F401
    cora2_root,
    cora_data,
    hetero_data,
    served_cora,
    served_hetero,
)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    ran = len(reporter.stats.get("passed", [])) + len(reporter.stats.get("failed", []))
    if ran == 0:
        reporter.write_line("error: no test ran (everything skipped or deselected)", red=True)
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
