"""Servers and trainers on different (simulated) hosts: training, and failures.

Two server hosts serve one part each from their own copy of only their
files; trainer hosts run plain multi-node ``torchrun`` with the server list
in ``PYG_DIST_SERVERS`` (``host:port``, no ``tcp://``). Host names differ,
so replies cross the veth links over TCP, not shared memory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.multihost import EXAMPLE, read_line, serve_on, torchrun
from support.servers import run_process_tree
from support.waiting import wait_until

pytestmark = pytest.mark.slow

TRAIN_ARGS = ["--seed", "0", "--epochs", "10"]


def _test_acc(output: str) -> float:
    found = re.findall(r"^test_acc=([0-9.]+)$", output, flags=re.M)
    assert found, output[-3000:]
    return float(found[-1])


@pytest.mark.timeout(600)
def test_two_trainer_hosts_train_as_well_as_launch(sim_hosts, cora2_root, tmp_path):
    s0, s1, t0, t1 = sim_hosts(4)
    servers = serve_on([s0, s1], cora2_root, tmp_path)
    env = {"PYG_DIST_SERVERS": ",".join(servers)}
    nodes = [host.popen(torchrun(k, t0, str(EXAMPLE), *TRAIN_ARGS), env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k, host in enumerate((t0, t1))]
    outs = [node.communicate(timeout=400) for node in nodes]
    for node, (out, err) in zip(nodes, outs):
        assert node.returncode == 0, out[-2000:] + err[-4000:]
    hosts_acc = _test_acc(outs[0][0])
    # Every batch's features came over the links: Cora's rows are 5.7 KB,
    # and ten epochs and a full-neighbourhood test pass read tens of MB.
    assert s0.bytes_sent() + s1.bytes_sent() > 20e6

    launch = run_process_tree([sys.executable, "-m", "pyg_dist", "launch", str(cora2_root),
                               "--nproc", "2", "--", str(EXAMPLE), *TRAIN_ARGS], timeout=400)
    assert launch.returncode == 0, launch.stderr[-4000:]
    launch_acc = _test_acc(launch.stdout)
    # The same seeds and world size: the batches are the same.
    assert hosts_acc > 0.6
    print(f"test accuracy: {hosts_acc} on two trainer hosts, {launch_acc} under launch")
    assert abs(hosts_acc - launch_acc) < 0.03, (hosts_acc, launch_acc)


@pytest.mark.timeout(400)
def test_a_dead_trainer_host_ends_the_other_rank_with_an_error(sim_hosts, cora2_root,
                                                                tmp_path):
    s0, s1, t0, t1 = sim_hosts(4)
    servers = serve_on([s0, s1], cora2_root, tmp_path)
    env = {"PYG_DIST_SERVERS": ",".join(servers)}
    args = ["--seed", "0", "--epochs", "100000", "--pg-timeout", "30"]
    nodes = [host.popen(torchrun(k, t0, str(EXAMPLE), *args), env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k, host in enumerate((t0, t1))]
    read_line(nodes[0], "epoch=0", 240)  # both ranks train
    t1.stop_all()  # the whole host: torchrun and its worker, SIGKILL after a grace
    start = time.monotonic()
    # The bound: the process-group timeout plus torchrun's own shutdown; it
    # must end on its own, not hang in the next all-reduce.
    _, err = nodes[0].communicate(timeout=30 + 90)
    elapsed = time.monotonic() - start
    assert nodes[0].returncode != 0
    assert "ChildFailedError" in err or "failed" in err, err[-3000:]
    assert re.search(r"(?i)gloo|connection|peer|timed out|closed", err), err[-3000:]
    cause = next((line for line in err.splitlines()
                  if re.search(r"(?i)gloo|connection|peer", line)), "")
    print(f"rank 0 exited {elapsed:.1f} s after its peer host died: {cause.strip()[:300]}")


@pytest.mark.timeout(500)
def test_torchrun_restarts_a_dead_worker_and_both_ranks_resume(sim_hosts, cora2_root,
                                                               tmp_path):
    """``--max-restarts`` with the elastic (c10d) rendezvous: one node's
    worker is killed after the first checkpoint; both nodes restart their
    workers, which resume from rank 0's checkpoint while the servers keep
    serving. (The first re-rendezvous may fail when the two agents restart
    at different moments; a later one succeeds, hence 3 restarts.)"""
    s0, s1, t0, t1 = sim_hosts(4)
    servers = serve_on([s0, s1], cora2_root, tmp_path)
    # Each rendezvous round gets a store of its own. torchrun's default
    # shares the agents' store with the workers of every round under the
    # same keys, so a restarted worker may read its peer's address of the
    # round before (still there until the peer's new worker overwrites it)
    # and Gloo times out connecting to a dead port ("connectFullMesh failed
    # ... Connect timeout"), the more likely the busier the machine.
    env = {"PYG_DIST_SERVERS": ",".join(servers), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    checkpoint = tmp_path / "checkpoint.pt"

    def elastic(host: str) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "1", "--max-restarts", "3", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{host}:29400", "--rdzv-id", "resume", str(EXAMPLE),
                "--epochs", "6", "--checkpoint", str(checkpoint), "--pg-timeout", "60"]

    nodes = [host.popen(elastic(t0.name), env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT) for host in (t0, t1)]
    def checkpointed() -> bool:
        ended = [n.returncode for n in nodes if n.poll() is not None]
        assert not ended, f"a node exited ({ended}) before the first checkpoint"
        return checkpoint.exists()

    wait_until(checkpointed, 240, f"rank 0 to write {checkpoint.name}", interval=0.2)
    workers = [pid for pid in t1.pids() if "train_sage_dist" in _cmdline(pid)
               and "torch.distributed.run" not in _cmdline(pid)]
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)
    outs = [node.communicate(timeout=400)[0] for node in nodes]
    for node, out in zip(nodes, outs):
        assert node.returncode == 0, out[-4000:]
        assert re.search(r"^resumed from .* at epoch [1-5]$", out, flags=re.M), out[-4000:]
    assert _test_acc(outs[0]) > 0.6
    assert all(proc.poll() is None for proc in s0.processes + s1.processes)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


LOOP = textwrap.dedent("""
    import sys
    import pyg_dist
    from pyg_dist.errors import PygDistError

    data = pyg_dist.RemoteData()
    loader = pyg_dist.DistNeighborLoader(data, num_neighbors=[10, 10], batch_size=64)
    print("serving", data.num_nodes, flush=True)
    try:
        while True:
            for batch in loader:
                pass
    except PygDistError as exc:
        print(f"error {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
""")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("failure", ["link_down", "server_killed"])
def test_a_lost_server_is_a_typed_error_naming_it(sim_hosts, cora2_root, tmp_path, failure):
    s0, s1, t0 = sim_hosts(3)
    servers = serve_on([s0, s1], cora2_root, tmp_path)
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    trainer = t0.popen([sys.executable, str(script)], {"PYG_DIST_SERVERS": ",".join(servers)},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    read_line(trainer, "serving 2708", 120)
    if failure == "link_down":
        s1.link(up=False)
    else:
        s1.processes[0].send_signal(signal.SIGKILL)
    start = time.monotonic()
    out, err = trainer.communicate(timeout=120)
    elapsed = time.monotonic() - start
    assert trainer.returncode == 3, out[-2000:] + err[-3000:]
    line = next(line for line in out.splitlines() if line.startswith("error "))
    assert re.match(r"error (ServerUnavailableError|RpcTimeoutError): ", line), line
    assert servers[1] in line, line
    print(f"{failure}: {line[:200]} after {elapsed:.1f} s")
