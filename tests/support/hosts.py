"""Simulated hosts on one machine: network namespaces on a veth bridge.

Each :class:`SimHost` is a network namespace (``ip netns``) with its own
``eth0`` on a private bridge and its own IPv4 address, and every command run
in it gets its own UTS namespace (``unshare --uts``) with the host's name,
so pyg-dist sees a different host (no shared memory between "hosts":
replies travel over TCP). Host names resolve on every host
(``/etc/netns/NS/hosts``, which ``ip netns exec`` mounts over
``/etc/hosts``). A host's link can be capped in both directions with
``tc ... tbf`` and taken down and up. (This kernel has no ``netem``; for latency use the
link-delay proxy of ``benchmarks/pyg_dist_bench``.)

Teardown ALWAYS runs, also when the test fails: every process started
through a host is stopped (SIGTERM, then SIGKILL), then whatever still runs
in a namespace (``ip netns pids``) is killed before the namespace is
deleted, then the bridge. Without root, or without ``ip`` / ``unshare``,
the fixture skips with the reason.

Example::

    def test_two_hosts(sim_hosts):
        a, b = sim_hosts(2)
        server = a.popen(["pyg-dist", "serve", root, "--part", "0",
                          "--bind", f"{a.address}:5555"])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Optional

import pytest

from pyg_dist.lifeline import exit_on_sigterm

# Names must fit the kernel's 15 characters; the pid keeps parallel sessions
# (and their bridges and subnets) apart.
_TAG = f"{os.getpid() % 100000:05d}"
# A /24 per session in 10.200-254.x, picked by pid, away from common LANs.
_SUBNET = f"10.{200 + os.getpid() % 55}.{(os.getpid() // 55) % 250}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def missing_requirements() -> Optional[str]:
    """Why simulated hosts cannot be made here, or ``None``."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, veth, tc)"
    for tool in ("ip", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"simulated hosts need '{tool}' on PATH"
    return None


class SimHost:
    """One simulated host: a network namespace with one address.

    Args:
        name: Its host name (also in the namespace's name).
        index: Its position; the address is ``SUBNET.(index + 2)``.
        env: Environment of every command run in it.
    """

    def __init__(self, name: str, index: int, env: dict[str, str]) -> None:
        self.name = name
        self.netns = f"pdh{_TAG}{index}"
        self.veth = f"pdv{_TAG}{index}"
        self.address = f"{_SUBNET}.{index + 2}"
        # gloo picks its interface from the host name otherwise (which does
        # not resolve here); NCCL likewise.
        self.env = {**env, "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
                    "HOSTNAME": name}
        self.processes: list[subprocess.Popen] = []

    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` as run inside this host (its namespace and host name)."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *cmd]

    def popen(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None,
              **kwargs) -> subprocess.Popen:
        """Starts ``cmd`` on this host in a session of its own; it is stopped
        at teardown. ``env`` is added to the host's environment."""
        kwargs.setdefault("text", True)
        proc = subprocess.Popen(self.command(cmd), env={**self.env, **(env or {})},
                                start_new_session=True, **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, cmd: Sequence[str], timeout: float, env: Optional[dict[str, str]] = None
            ) -> subprocess.CompletedProcess:
        """Runs ``cmd`` to completion (output captured); stopped at the timeout."""
        proc = self.popen(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                stop(proc)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def link(self, up: bool) -> None:
        """Takes the host's link down (no packet in or out) or up again."""
        _ip("-n", self.netns, "link", "set", "eth0", "up" if up else "down")

    def cap(self, rate: Optional[str]) -> None:
        """Caps the host's link to ``rate`` (tc's units, e.g. ``1gbit``) in
        both directions, as a NIC of that speed would: a token bucket on
        what it sends (its ``eth0``) and on what it receives (the bridge's
        end of its veth). ``None`` removes the caps."""
        for prefix, dev in ((["ip", "netns", "exec", self.netns], "eth0"), ([], self.veth)):
            base = [*prefix, "tc", "qdisc"]
            subprocess.run([*base, "del", "dev", dev, "root"], capture_output=True,
                           timeout=30)
            if rate is not None:
                # A burst of 4 ms at the rate (at least 64 KiB), and a queue
                # of 50 ms: what a real NIC and switch buffer, about.
                subprocess.run([*base, "add", "dev", dev, "root", "tbf", "rate", rate,
                                "burst", _burst(rate), "latency", "50ms"],
                               check=True, capture_output=True, timeout=30)

    def bytes_sent(self) -> int:
        """Bytes this host has sent over its link (its veth's counter)."""
        out = _ip("-n", self.netns, "-s", "link", "show", "eth0").stdout.split("\n")
        tx = next(i for i, line in enumerate(out) if line.strip().startswith("TX:"))
        return int(out[tx + 1].split()[0])

    def pids(self) -> list[int]:
        """Every process running in this host's namespace."""
        return [int(pid) for pid in _ip("netns", "pids", self.netns, check=False).stdout.split()]

    def stop_all(self) -> None:
        """Stops every process started here, then anything else left in the
        namespace."""
        for proc in self.processes:
            stop(proc)
        pids = _ip("netns", "pids", self.netns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _ip("netns", "pids", self.netns, check=False).stdout.split() \
                and time.monotonic() < deadline:
            time.sleep(0.1)


def host_files(root: Path, dest: Path, parts: list[int]) -> Path:
    """Copies what a server host of ``parts`` needs to ``dest``."""
    dest.mkdir(parents=True)
    for entry in root.iterdir():
        if entry.is_file():  # meta.json and the book(s)
            shutil.copy(entry, dest / entry.name)
    for k in parts:
        shutil.copytree(root / f"part-{k}", dest / f"part-{k}")
    return dest


def _burst(rate: str) -> str:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for unit, scale in units.items():
        if rate.endswith(unit):
            bits = float(rate[:-len(unit)]) * scale
            # tbf needs a burst of at least rate / HZ; 250 is the coarsest
            # common kernel HZ.
            return str(max(64 * 1024, int(bits / 8 / 250)))
    return str(64 * 1024)


def stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the process's session, SIGKILL after ``grace``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the session left behind
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class SimNetwork:
    """A bridge and the hosts on it; :meth:`close` removes everything."""

    def __init__(self, env: Optional[dict[str, str]] = None) -> None:
        self.bridge = f"pdb{_TAG}"
        self.env = dict(os.environ if env is None else env)
        self.hosts: list[SimHost] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str, rate: Optional[str] = None) -> SimHost:
        """Adds one host named ``name``, its link capped at ``rate`` if given."""
        host = SimHost(name, len(self.hosts), self.env)
        self.hosts.append(host)
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns",
            host.netns)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        if rate is not None:
            host.cap(rate)
        self._write_hosts_files()
        return host

    def _write_hosts_files(self) -> None:
        # `ip netns exec NS` mounts /etc/netns/NS/hosts over /etc/hosts: every
        # host resolves every other one by name, as on a real cluster.
        lines = ["127.0.0.1 localhost"] + [f"{h.address} {h.name}" for h in self.hosts]
        for host in self.hosts:
            directory = Path("/etc/netns") / host.netns
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        """Stops every process, deletes every namespace and the bridge."""
        for host in self.hosts:
            with contextlib.suppress(Exception):
                host.stop_all()
        for host in self.hosts:
            _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.veth, check=False)
            shutil.rmtree(Path("/etc/netns") / host.netns, ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
        self.hosts = []


@contextlib.contextmanager
def sim_network(names: Sequence[str], rate: Optional[str] = None,
                env: Optional[dict[str, str]] = None) -> Iterator[list[SimHost]]:
    """Hosts named ``names`` on one bridge (links capped at ``rate``);
    everything is removed on exit, also when the program is sent SIGTERM
    (a benchmark stopped with ``kill`` or ``timeout``): the default action
    would end it before any ``finally`` ran, leaving the namespaces and the
    processes in them behind."""
    with exit_on_sigterm():
        net = SimNetwork(env)
        try:
            for name in names:
                net.add(name, rate)
            yield net.hosts
        finally:
            net.close()


@pytest.fixture
def sim_hosts() -> Iterator:
    """A factory ``sim_hosts(n, rate=None, prefix="host")`` of simulated
    hosts; skips where they cannot be made; removes them after the test."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    nets: list[SimNetwork] = []

    def make(n: int, rate: Optional[str] = None, prefix: str = "host") -> list[SimHost]:
        if nets:
            raise RuntimeError("one network per test; ask for every host at once")
        try:
            net = SimNetwork()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot create a bridge here: {exc.stderr.strip()}")
        nets.append(net)
        return [net.add(f"{prefix}{i}", rate) for i in range(n)]

    try:
        yield make
    finally:
        for net in nets:
            net.close()
