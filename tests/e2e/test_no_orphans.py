"""No process outlives its parent: servers started by ``LocalCluster`` and by
``pyg-dist launch`` stop when their parent dies, by any signal (SIGKILL
included), and SIGTERM to a script inside ``with LocalCluster(...)``
cleans up as Ctrl-C does."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from support.examples import launch_command
from support.waiting import wait_until

# The bound: a server is gone within 5 s of its parent's death.
SERVER_EXIT_S = 5.0

CLUSTER_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pyg_dist.cluster import LocalCluster
    with LocalCluster(sys.argv[1], forwarding=True, startup_timeout=120) as cluster:
        info = " ".join(str(p.pid) for p in cluster.processes) + "\\n" + str(cluster.peers_file)
        with open(sys.argv[2] + ".partial", "w") as out:
            out.write(info)
        os.rename(sys.argv[2] + ".partial", sys.argv[2])
        time.sleep(600)  # still serving when the signal comes
""")


def _running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie has exited: it only waits for
    whoever adopted it to reap it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_left(procs: list[psutil.Process]) -> None:
    """Leaves no process behind when the test failed."""
    for proc in procs:
        if _running(proc):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def _start_cluster_script(root: str, tmp_path: Path
                          ) -> tuple[subprocess.Popen, list[psutil.Process], Path]:
    script = tmp_path / "cluster_script.py"
    script.write_text(CLUSTER_SCRIPT)
    info = tmp_path / "info"
    proc = subprocess.Popen([sys.executable, str(script), root, str(info)])

    def written() -> bool:
        assert proc.poll() is None, f"the script exited ({proc.returncode}) before serving"
        return info.exists()

    try:
        wait_until(written, 240, "the script's cluster to be ready", interval=0.1)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    pids, peers_file = info.read_text().split("\n")
    return proc, [psutil.Process(int(pid)) for pid in pids.split()], Path(peers_file)


def test_servers_stop_when_the_script_holding_the_cluster_is_killed(cora2_root, tmp_path):
    proc, servers, _ = _start_cluster_script(str(cora2_root), tmp_path)
    try:
        assert len(servers) == 2 and all(_running(s) for s in servers)
        proc.send_signal(signal.SIGKILL)  # no cleanup runs in the script
        proc.wait(30)
        wait_until(lambda: not any(_running(s) for s in servers), SERVER_EXIT_S,
                   f"the servers {[s.pid for s in servers]} to stop after their parent died")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        _kill_left(servers)


def test_sigterm_to_a_script_inside_with_local_cluster_cleans_up(cora2_root, tmp_path):
    proc, servers, peers_file = _start_cluster_script(str(cora2_root), tmp_path)
    try:
        assert peers_file.exists()
        proc.send_signal(signal.SIGTERM)
        # SIGTERM unwinds the with block (SystemExit(143)): the cluster stops
        # its servers itself, then the script exits with SIGTERM's status.
        assert proc.wait(60) == 143
        assert not any(_running(s) for s in servers)
        assert not peers_file.parent.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        _kill_left(servers)


TRAINER = textwrap.dedent("""
    import os, sys, time
    open(sys.argv[1] + ".partial", "w").write(str(os.getpid()))
    os.rename(sys.argv[1] + ".partial", sys.argv[1])
    time.sleep(600)
""")


@pytest.mark.slow
def test_killing_launch_leaves_no_server_torchrun_or_trainer(cora2_root, tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen(launch_command(str(cora2_root), 1, str(script), str(pid_file)),
                            stdout=subprocess.DEVNULL)
    tree: list[psutil.Process] = []
    try:
        def trainer_started() -> bool:
            assert proc.poll() is None, f"launch exited ({proc.returncode}) early"
            return pid_file.exists()

        wait_until(trainer_started, 240, "the trainer to write its pid", interval=0.1)
        tree = psutil.Process(proc.pid).children(recursive=True)
        servers = [p for p in tree if "serve" in p.cmdline()]
        others = [p for p in tree if p not in servers]
        trainer = int(pid_file.read_text())
        assert len(servers) == 2 and trainer in {p.pid for p in others}
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        wait_until(lambda: not any(_running(s) for s in servers), SERVER_EXIT_S,
                   "the servers to stop after launch was killed")
        # torchrun gets SIGTERM from the kernel and stops its worker (it
        # gives workers up to 30 s).
        wait_until(lambda: not any(_running(p) for p in others), 60,
                   f"torchrun and the trainer {[p.pid for p in others]} to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        _kill_left(tree)


def test_sigterm_handling_left_from_another_thread_does_not_raise():
    """A cluster started on the main thread may be stopped by another: the
    SIGTERM handler cannot be reset there, and leaving it must not fail."""
    import threading

    from pyg_dist.lifeline import exit_on_sigterm

    # A session-wide cluster of an earlier test may have installed it.
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stack = contextlib.ExitStack()
    assert stack.enter_context(exit_on_sigterm()) is True
    errors: list[BaseException] = []

    def close() -> None:
        try:
            stack.close()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    closer = threading.Thread(target=close)
    closer.start()
    closer.join(10)
    try:
        assert not errors, errors
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # On the main thread it is restored.
        with exit_on_sigterm():
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
