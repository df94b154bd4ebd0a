"""Run a test's worker in several threads and surface what went wrong."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(worker: Callable[[int], None], count: int, timeout: float = 120.0) -> None:
    """Runs ``worker(t)`` for ``t`` in ``range(count)``, each in its own thread.

    Raises:
        AssertionError: if a thread is still running after ``timeout``
            seconds (a hang), naming how many.
        BaseException: the first exception a worker raised, re-raised here
            in the test's own thread so pytest reports it.
    """
    errors: list[BaseException] = []

    def guarded(t: int) -> None:
        try:
            worker(t)
        except BaseException as exc:  # re-raised in the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    alive = sum(thread.is_alive() for thread in threads)
    assert not alive, f"{alive} of {count} threads still running after {timeout:g}s"
    if errors:
        raise errors[0]
