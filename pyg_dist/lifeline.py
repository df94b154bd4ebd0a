"""No orphans: the processes pyg-dist starts die with the process that started them.

A parent that dies by SIGKILL runs no cleanup, so the child has to notice
on its own. Three pieces, one per side:

* :class:`Lifeline` (parent side): a pipe whose write end only the parent
  holds. The kernel closes it when the parent dies, by any signal, so the
  children see end-of-file at once. Its read end and the parent's pid go
  to each child (``pass_fds`` and the ``PYG_DIST_LIFELINE`` variable).
* :func:`watch_parent` (child side, ``pyg-dist serve``): a daemon thread
  that waits for that end-of-file, and, as a fallback where the pipe does
  not tell (the write end also held by a process the parent forked), for
  ``getppid()`` to change. Then it sends the process SIGTERM (a clean
  stop) and, if that has not ended it after a grace period, exits hard.
* :func:`die_with_parent` (for a child that is not ours, torchrun): Linux's
  ``PR_SET_PDEATHSIG``, set between ``fork`` and ``exec``. It fires when
  the *thread* that forked dies, which is why the servers, whose launcher
  may run in any thread, use the pipe instead.

:func:`exit_on_sigterm` makes SIGTERM unwind the main thread like Ctrl-C
does (``SystemExit(143)``), so ``with`` blocks and ``finally`` clauses run:
SIGTERM is what systemd, Kubernetes and Slurm send.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Optional

from pyg_dist.errors import PygDistError

logger = logging.getLogger(__name__)

LIFELINE_ENV = "PYG_DIST_LIFELINE"
"""``<fd>:<parent pid>``: the read end of the parent's lifeline pipe and the
pid of the parent, set by :meth:`Lifeline.child_environment`."""

SIGTERM_EXIT_CODE = 128 + signal.SIGTERM
"""The exit status of a process that stopped because of SIGTERM (143)."""

# How often the watcher looks at getppid() when the pipe says nothing.
_POLL_S = 0.5
# How long a clean stop may take after the parent died before a hard exit:
# with the poll, the child is gone well within 5 s of its parent.
_HARD_EXIT_AFTER_S = 3.0

_PR_SET_PDEATHSIG = 1


class Lifeline:
    """The parent's end of a pipe its children watch for end-of-file.

    Usage::

        lifeline = Lifeline()
        proc = subprocess.Popen(cmd, env=lifeline.child_environment(env),
                                pass_fds=lifeline.pass_fds)
        ...
        lifeline.close()   # after the children were stopped

    The write end is not inheritable (``os.pipe``), so no ``exec``-ed
    process holds it; only this process does.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._pid = os.getpid()

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors a child must inherit (``Popen(pass_fds=...)``)."""
        return () if self._read < 0 else (self._read,)

    def child_environment(self, env: Optional[dict[str, str]]) -> dict[str, str]:
        """``env`` (this process's environment when ``None``) plus
        :data:`LIFELINE_ENV` naming the pipe and this process."""
        child = dict(os.environ if env is None else env)
        if self._read >= 0:
            child[LIFELINE_ENV] = f"{self._read}:{self._pid}"
        return child

    def children_started(self) -> None:
        """Closes this process's copy of the read end once every child has
        its own (it is only needed to hand on)."""
        if self._read >= 0:
            os.close(self._read)
            self._read = -1

    def close(self) -> None:
        """Cuts the lifeline: the children see end-of-file. Safe to call twice."""
        self.children_started()
        if self._write >= 0:
            os.close(self._write)
            self._write = -1


def _parse_lifeline(text: str) -> tuple[int, int]:
    fd, sep, pid = text.partition(":")
    if not (sep and fd.isascii() and fd.isdigit() and pid.isascii() and pid.isdigit()):
        raise PygDistError(f"{LIFELINE_ENV} must be '<fd>:<parent pid>' (set by pyg-dist's "
                           f"launchers; unset it to run the server on its own), got "
                           f"{text[:40]!r}")
    return int(fd), int(pid)


def watch_parent() -> bool:
    """Ends this process when the parent named by :data:`LIFELINE_ENV` dies.

    Does nothing (returns ``False``) when the variable is not set: a server
    started by hand lives until it is stopped. The variable is removed from
    ``os.environ`` so that no process this one starts watches the wrong pid.

    Once the parent is gone: SIGTERM to this process (its clean stop), then
    ``os._exit(143)`` if it still runs :data:`_HARD_EXIT_AFTER_S` later.

    Raises:
        PygDistError: if the variable is malformed.
    """
    text = os.environ.pop(LIFELINE_ENV, None)
    if text is None:
        return False
    fd, parent = _parse_lifeline(text)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        fd = -1  # not open: the pid watch alone
    watcher = threading.Thread(target=_watch, args=(fd, parent, _stop_this_process),
                               name="pyg-dist-lifeline", daemon=True)
    watcher.start()
    return True


def _parent_gone(fd: int, parent: int) -> bool:
    """Waits up to one poll period; whether the parent has died."""
    if fd >= 0:
        readable, _, _ = select.select([fd], [], [], _POLL_S)
        if readable and not os.read(fd, 1):
            return True
    else:
        threading.Event().wait(_POLL_S)
    return os.getppid() != parent


def _watch(fd: int, parent: int, on_death: Callable[[], None]) -> None:
    while not _parent_gone(fd, parent):
        pass
    logger.warning("the parent process (pid %d) is gone: stopping", parent)
    on_death()


def _stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(_HARD_EXIT_AFTER_S)
    logging.shutdown()
    os._exit(SIGTERM_EXIT_CODE)


def die_with_parent_preexec() -> Optional[Callable[[], None]]:
    """A ``Popen(preexec_fn=...)`` that makes the child get SIGTERM when the
    thread calling ``Popen`` dies (Linux ``PR_SET_PDEATHSIG``; survives
    ``exec``), or ``None`` where the platform has no such call.

    For children whose code is not ours (torchrun). The C function is looked
    up here, before ``fork``: the child only calls it.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _raise_sigterm_exit(signum: int, frame: object) -> None:
    raise SystemExit(SIGTERM_EXIT_CODE)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[bool]:
    """While inside, SIGTERM raises ``SystemExit(143)`` in the main thread,
    so ``finally`` clauses and ``with`` blocks run as on Ctrl-C.

    Changes nothing (yields ``False``) off the main thread or when a SIGTERM
    handler other than the default is installed: the program's own handler
    decides. The previous handler is restored on leaving.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield False
        return
    signal.signal(signal.SIGTERM, _raise_sigterm_exit)
    try:
        yield True
    finally:
        # Left from another thread (a cluster stopped by a worker thread),
        # the handler stays: only the main thread may set one, and it does
        # no harm (SIGTERM still ends the program, with its cleanup).
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is _raise_sigterm_exit:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
