"""Wait for a condition instead of sleeping and hoping it happened.

A fixed ``time.sleep`` before an assertion is either too short on a loaded
machine (the test flakes) or longer than needed everywhere else. Where the
condition itself can be observed (a server statistic, a file appearing, a
process gone), poll it with a bound and fail with a message naming what
never happened.

Example::

    from support.waiting import wait_until

    wait_until(lambda: not pid_alive(pid), 30, "the trainer to exit")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str,
               interval: float = 0.01) -> T:
    """Calls ``condition`` until it returns something true; returns that.

    Args:
        condition: Checked at once, then every ``interval`` seconds.
        timeout: Seconds after which waiting fails.
        what: What is awaited, for the failure message ("the server to
            take every request").
        interval: Seconds between checks; the sleep only paces the polling
            (the wait ends on the condition, not on the clock).

    Raises:
        AssertionError: if ``condition`` was still false after ``timeout``
            seconds; the message names ``what`` and the last value seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} "
                                 f"(last seen: {value!r})")
        time.sleep(interval)
