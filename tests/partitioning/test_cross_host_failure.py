"""A rank of a cross-host partitioning run that fails stops every rank within
seconds, not at gloo's timeout: two (once three) real ranks (processes, gloo on
loopback) where rank 1 alone meets a real problem (edge ids out of range in
the one parquet file only it reads, a ROOT it cannot create, SIGTERM,
Ctrl-C). Both exit non-zero, rank 0's error names rank 1 and what went
wrong, and nothing is left behind (no ROOT, no staging directory, no probe
file)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.servers import stop_process_tree

from pyg_dist.partitioning.file_export import write_data_files

# Each rank writes what it raised (or "ok") to REPORTS/rank-R. The group's
# timeout is far above the test's: a rank left waiting would fail the test.
_RANK = textwrap.dedent("""
    import datetime, signal, sys
    from importlib.metadata import EntryPoint
    from pathlib import Path
    import torch.distributed as dist
    from pyg_dist.partitioning.cross_host import partition_files_across_ranks
    from pyg_dist.plugins import PARTITIONERS, PluginRegistry

    rank, world, port, source, root, reports, case = (int(sys.argv[1]), int(sys.argv[2]),
                                                       *sys.argv[3:])
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, even if the test runs
    # under a shell that started it in the background (SIGINT ignored, inherited).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    partitioner, registry, options = "hash", None, {}
    if case in ("SIGTERM", "SIGINT", "SIGSTOP"):
        registry = PluginRegistry([EntryPoint("signalled", "signalled_partitioner:Signalled",
                                              PARTITIONERS)])
        partitioner, options = "signalled", {"signum": case}
    if case == "different-books":
        registry = PluginRegistry([EntryPoint("by-rank", "signalled_partitioner:ByRank",
                                              PARTITIONERS)])
        partitioner = "by-rank"
    if case == "root-not-writable" and rank == 1:
        root = str(Path(root).parent / "a-file" / "out")
    if case == "SIGSTOP-in-shuffle" and rank == 1:
        # Rank 1 stops (as a lost host: nothing closed) once the staging
        # directory exists and the edges are being exchanged.
        import os, signal
        from pyg_dist.partitioning import cross_host
        def stop(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGSTOP)
        cross_host._exchange_edges = stop
    timeout = 3.0 if case.startswith("SIGSTOP") else 60.0
    try:
        partition_files_across_ranks(source, 3, root, partitioner, chunk_edges=300,
                                     registry=registry, peer_timeout=timeout, **options)
    except BaseException as exc:
        Path(reports, f"rank-{rank}").write_text(f"{type(exc).__name__}: {exc}")
        raise
    Path(reports, f"rank-{rank}").write_text("ok")
""")

# The hash partitioner, but rank 1 receives a signal while it assigns.
_SIGNALLED = textwrap.dedent("""
    import os, signal, time
    from pyg_dist_plugins.partitioners.hash import HashPartitioner

    class Signalled(HashPartitioner):
        def __init__(self, signum):
            super().__init__()
            self.signum = signum
        def assign_stream(self, stream, num_parts):
            if stream.rank == 1:
                os.kill(os.getpid(), getattr(signal, self.signum))
                time.sleep(60)  # the handler raises here
            return super().assign_stream(stream, num_parts)

    # Breaks the contract of assigns_across_ranks: another book on every rank.
    class ByRank(HashPartitioner):
        def assign_stream(self, stream, num_parts):
            return HashPartitioner(seed=stream.rank).assign_stream(stream, num_parts)
""")


def _state(pid: int) -> str:
    """A process's state letter (``T``: stopped), from ``/proc``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _source(tmp_path: Path) -> Path:
    """The test graph in three parquet files; the last (which rank 1 alone
    reads) has a destination past the last node."""
    from test_out_of_core import _graph

    source = write_data_files(_graph(), tmp_path / "files")
    path = next((source / "edges").glob("*.parquet"))
    table = pq.read_table(path)
    path.unlink()
    cuts = [0, table.num_rows // 3, 2 * table.num_rows // 3, table.num_rows]
    for i in range(3):
        part = table.slice(cuts[i], cuts[i + 1] - cuts[i])
        if i == 2:
            dst = part.column("dst").to_numpy().copy()
            dst[len(dst) // 2] = 10_000  # the graph has 600 nodes
            part = part.set_column(part.schema.get_field_index("dst"), "dst",
                                   pa.array(dst, type=pa.int64()))
        pq.write_table(part, source / "edges" / f"part-{i:05d}.parquet", row_group_size=400)
    return source


def _run_ranks(tmp_path: Path, case: str, world: int = 2,
               stop_after: Optional[dict[int, str]] = None
               ) -> tuple[list[int], list[float], list[str]]:
    """Starts both ranks, waits for both (stopping them whatever happens);
    returns their exit codes, when each ended and their stderr. A rank in
    ``stop_after`` is killed once every other rank ended, if its process
    state (``/proc/PID/stat``) is the one given (``T``: stopped)."""
    stop_after = stop_after or {}
    script, reports = tmp_path / "rank.py", tmp_path / "reports"
    script.write_text(_RANK)
    (tmp_path / "signalled_partitioner.py").write_text(_SIGNALLED)
    reports.mkdir()
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), str(world), str(port),
                               str(tmp_path / "files"), str(tmp_path / "out"), str(reports),
                               case], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for rank in range(world)]
    ended: list[float] = [0.0] * world
    try:
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if p.poll() is not None and not ended[i]:
                    ended[i] = time.monotonic()
            if all(p.poll() is not None for i, p in enumerate(procs) if i not in stop_after):
                for i, state in stop_after.items():
                    if procs[i].poll() is None and _state(procs[i].pid) == state:
                        procs[i].kill()
            time.sleep(0.05)
        for i, p in enumerate(procs):
            if p.poll() is not None and not ended[i]:
                ended[i] = time.monotonic()
        assert all(p.poll() is not None for p in procs), "a rank was left waiting"
        errs = [p.communicate()[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                stop_process_tree(p)
    return [p.returncode for p in procs], ended, errs


@pytest.mark.parametrize("case, says", [
    ("bad-shard", "InvalidPartitionArgumentError: "),
    # Two ranks and torch's import take 10-20 s on the shared 2 cores.
    pytest.param("root-not-writable", "Error: ", marks=pytest.mark.slow),
    ("SIGTERM", "stopped by SIGTERM"),
    pytest.param("SIGINT", "interrupted (SIGINT, Ctrl-C)", marks=pytest.mark.slow),
])
def test_a_rank_that_fails_stops_every_rank_at_once(tmp_path, case, says):
    _source(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    codes, ended, errs = _run_ranks(tmp_path, case)
    assert codes[0] != 0 and codes[1] != 0, errs
    # Rank 0 stopped because rank 1 did, not at the group's timeout.
    assert ended[0] - ended[1] < 30, errs
    told = (tmp_path / "reports" / "rank-0").read_text()
    assert told.startswith("PartitionError: rank 1 of 2 failed: "), told
    assert says in told, told
    own = (tmp_path / "reports" / "rank-1").read_text()
    if case == "bad-shard":
        assert "part-00002.parquet" in told and "outside [0, 600)" in told, told
        assert own.startswith("InvalidPartitionArgumentError: ") and "outside" in own, own
    elif case == "SIGTERM":
        assert own.startswith("PartitionError: rank 1 of 2 was stopped by SIGTERM"), own
    elif case == "SIGINT":
        assert own.startswith("KeyboardInterrupt"), own
    # Nothing left behind: no ROOT, no staging directory, no probe file.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file", "files", "rank.py", "reports", "signalled_partitioner.py"]


@pytest.mark.parametrize("case", ["SIGSTOP", pytest.param("SIGSTOP-in-shuffle",
                                                          marks=pytest.mark.slow)])
def test_a_rank_that_falls_silent_stops_the_others_after_the_peer_timeout(tmp_path, case):
    """Rank 1 is stopped (SIGSTOP: its connections stay open, as a host's
    that is cut off): rank 0 does not wait for gloo's timeout (600 s here)
    but for 3 s of silence, removes what it staged, names rank 1 and exits
    with status 75; rank 1 is killed by the test."""
    _source(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    codes, ended, errs = _run_ranks(tmp_path, case, stop_after={1: "T"})
    assert codes[0] == 75, errs
    assert "PartitionError: rank 1 of 2 was not heard from for" in errs[0], errs[0]
    assert "its host lost, or its process stopped or hung" in errs[0], errs[0]
    # Rank 0's main thread never returned: it wrote no report of its own.
    assert not (tmp_path / "reports" / "rank-0").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file", "files", "rank.py", "reports", "signalled_partitioner.py"]


@pytest.mark.slow
def test_a_plugin_that_returns_another_book_on_each_rank_fails_every_rank(tmp_path):
    _source(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    codes, _, errs = _run_ranks(tmp_path, "different-books")
    assert codes[0] != 0 and codes[1] != 0, errs
    for rank in (0, 1):
        told = (tmp_path / "reports" / f"rank-{rank}").read_text()
        assert "ByRank returned different parts on the ranks" in told, told
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file", "files", "rank.py", "reports", "signalled_partitioner.py"]


@pytest.mark.slow
def test_with_three_ranks_every_other_rank_names_the_one_that_failed(tmp_path):
    """Rank 2 alone reads the bad file (the third of three); ranks 0 and 1
    may wait on each other rather than on rank 2: each rank that stops
    destroys its group in turn, so all stop, and both name rank 2."""
    _source(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    codes, ended, errs = _run_ranks(tmp_path, "bad-shard", world=3)
    assert all(code != 0 for code in codes), errs
    assert max(ended) - ended[2] < 30, errs
    for rank in (0, 1):
        told = (tmp_path / "reports" / f"rank-{rank}").read_text()
        assert told.startswith("PartitionError: rank 2 of 3 failed: "), told
        assert "part-00002.parquet" in told, told
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file", "files", "rank.py", "reports", "signalled_partitioner.py"]


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_a_peer_timeout_that_is_not_a_positive_number_is_refused_before_anything_runs(
        tmp_path, timeout):
    from pyg_dist.errors import InvalidPartitionArgumentError
    from pyg_dist.partitioning.cross_host import partition_files_across_ranks

    with pytest.raises(InvalidPartitionArgumentError, match="peer_timeout must be"):
        partition_files_across_ranks(tmp_path / "files", 2, tmp_path / "out",
                                     peer_timeout=timeout)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
