"""A server stops within 2 s of SIGTERM while every worker is deep inside an
operation, more requests wait behind them, and a CPU hog competes for the
cores: a stop must not wait for work whose replies nobody will read."""

from __future__ import annotations

import os
import signal
import time

import pytest
from support import busy_store
from support.rawzmq import RawDealer
from support.servers import serve_part
from support.waiting import wait_until

from pyg_dist.partitioning import PartitionReader
from pyg_dist.rpc import wire_format

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_FLIGHT = 8
WORKERS = 4
STOP_WITHIN_S = 2.0


def _get(ids, req_id: int) -> list:
    # Over 16 KiB of ids: served by a worker, not inline on the I/O thread.
    return wire_format.encode_request(req_id, "get", {"groups": [{"attrs": ["x"]}]},
                                      [ids.repeat(3000)])


@pytest.mark.timeout(240)
def test_sigterm_stops_a_server_with_batches_in_flight_and_a_cpu_hog(cora2_root, tmp_path,
                                                                    cpu_hog):
    busy_store.install_dist_info(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, BUSY_STORE_DIR=str(marks), BUSY_STORE_SECONDS="120",
               PYTHONPATH=os.pathsep.join([str(tmp_path), TESTS,
                                           os.environ.get("PYTHONPATH", "")]))
    ids = PartitionReader(cora2_root).load_part(0, topology=False).node_ids[:3]
    args = ["--feature-store", busy_store.NAME, "--workers", str(WORKERS)]
    with serve_part(cora2_root, 0, serve_args=args, env=env) as (proc, endpoint):
        with RawDealer(endpoint, timeout=2) as dealer:
            for k in range(IN_FLIGHT):
                dealer.send(_get(ids, k + 1))
            # Every worker is inside a read; the other requests wait for one.
            wait_until(lambda: len(os.listdir(marks)) >= WORKERS, 120,
                       f"{WORKERS} workers to be inside a read", interval=0.05)
            assert cpu_hog.poll() is None
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            took = time.monotonic() - start
        assert code == 0
        assert took < STOP_WITHIN_S, f"the server took {took:.2f} s to stop after SIGTERM"
