"""Nothing of a client's shared memory outlives it: not when a server is
SIGKILLed with a batch in flight and the store closes, not when a forked
loader worker is killed mid-batch. Real ``pyg-dist serve`` processes on
127.0.0.1.

Segments were files in /dev/shm until a server mapped them: one lent to
several servers at once whose server died, or one of a DataLoader worker
SIGTERMed at shutdown (which runs no exit hooks), stayed there (a full
suite run left one 1 MiB file). They are memfds now: no file, and memory
the kernel frees once no process holds it. Each test checks its own
segments only (another run on the machine may make or remove its own).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading

import pytest
import torch
from support.servers import serve_parts
from support.shm_files import has_file, needs_shm
from support.waiting import wait_until
from torch_geometric.data import TensorAttr

from pyg_dist.errors import RpcError
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.store.connect import connect

pytestmark = needs_shm


def _fetch(fs, ids):
    return fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])


def _segments(fs) -> dict[str, object]:
    """The client's segments now, by name: batch outputs and lent replies."""
    router = fs.router
    found = {s.name: s for s in (router._outputs._all if router._outputs else ())}
    for pool in router.client.transport._lender._pools.values():
        found.update((s.name, s) for s in pool._all)
    return found


def _memfds(pid: int | str, where: str) -> set[str]:
    """Names of the pyg-dist memfds process ``pid`` maps (``maps``) or holds
    a descriptor of (``fd``)."""
    if where == "maps":
        with open(f"/proc/{pid}/maps") as maps:
            lines = [line.split()[-2] for line in maps if "/memfd:pyg-dist-shm-" in line]
    else:
        lines = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                lines.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:  # closed meanwhile
                continue
    return {line.split("/memfd:", 1)[1].split()[0] for line in lines if "/memfd:" in line}


def test_a_server_killed_with_a_batch_in_flight_leaves_nothing_after_close(cora2_root,
                                                                           cora_data):
    ids = torch.arange(cora_data.num_nodes)
    with serve_parts(cora2_root) as cluster:
        survivor, victim = cluster.processes
        fs, _ = connect(cluster.endpoints, RpcConfig(timeout=30.0, retries=0))
        failures: list[BaseException] = []
        try:
            held = _fetch(fs, ids)  # both map the first segment; it stays in use
            first = set(_segments(fs))
            victim.send_signal(signal.SIGSTOP)
            worker = threading.Thread(target=lambda: _catch(failures, lambda: _fetch(fs, ids)))
            worker.start()
            # The second batch's segment, mapped by the survivor only.
            wait_until(lambda: set(_segments(fs)) - first
                       and (set(_segments(fs)) - first) <= _memfds(survivor.pid, "maps"),
                       60, "the surviving server to map the second batch's segment")
            names = set(_segments(fs))
            victim.send_signal(signal.SIGKILL)
            worker.join(timeout=60)
            assert not worker.is_alive() and len(failures) == 1
            assert isinstance(failures[0], RpcError), failures
            segments = list(_segments(fs).values())
        finally:
            fs.close()
        assert names and not any(has_file(s) for s in segments)
        assert all(s.path is None for s in segments)  # no descriptor open for servers
        assert not names & _memfds(survivor.pid, "maps")  # released on close
        del held, segments
        failures.clear()  # its traceback holds the failed batch's outputs
        gc.collect()
        # The last views gone, nothing holds the memory: no mapping, and no
        # descriptor (an mmap object keeps a duplicate of its own).
        assert not names & (_memfds("self", "maps") | _memfds("self", "fd"))


def _catch(failures: list[BaseException], work) -> None:
    try:
        work()
    except BaseException as exc:  # the test asserts what it was
        failures.append(exc)


def _worker(fs, ids, names) -> None:
    """A forked loader worker: fetches a batch (its servers map the
    segment), has the next batch's outputs made (not sent yet: a segment
    file of earlier versions would still be there), reports its segments
    and is killed before it could clean anything up."""
    torch.set_num_threads(1)  # OpenMP's thread pool does not survive fork
    held = _fetch(fs, ids)  # noqa: F841 (held: the next batch needs a segment of its own)
    pending = fs.router._outputs.lease([(torch.float32, (len(ids), 1433))])
    assert pending is not None
    names.send(sorted(_segments(fs)))  # written before send returns: no feeder thread
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_forked_worker_leaves_nothing(cora2_root, cora_data):
    ids = torch.arange(cora_data.num_nodes)
    with serve_parts(cora2_root) as cluster:
        fs, _ = connect(cluster.endpoints)
        try:
            _fetch(fs, ids[:10])  # the parent has a client before the fork, like a loader
            ctx = multiprocessing.get_context("fork")
            reader, names = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_worker, args=(fs, ids, names))
            child.start()
            try:
                assert reader.poll(120), "the worker reported no segments"
                theirs = set(reader.recv())
                child.join(timeout=60)
                assert child.exitcode == -signal.SIGKILL
            finally:
                if child.is_alive():
                    child.kill()
                    child.join(timeout=10)
            assert theirs and not any(has_file(_Named(n)) for n in theirs)
            # The servers unmap a dead client's segments when they next map one.
            other, _ = connect(cluster.endpoints)
            try:
                _fetch(other, ids)
                for server in cluster.processes:
                    assert not theirs & _memfds(server.pid, "maps")
            finally:
                other.close()
        finally:
            fs.close()


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture(autouse=True)
def _no_stray_threads():
    yield
    gc.collect()
