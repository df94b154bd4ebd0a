"""``pyg-dist serve --part K,L``: several parts from one process, and a server
host that holds only meta.json, the book and its own parts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from support.hosts import host_files
from support.servers import stop_process_tree

import pyg_dist
from pyg_dist.errors import InvalidPartitionArgumentError, PartitionFormatError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.server.group import ServerGroup, group_endpoints


@pytest.fixture(scope="module")
def cora3(tmp_path_factory, cora_data):
    root = tmp_path_factory.mktemp("group") / "cora-3"
    pyg_dist.partition(cora_data, 3, root, partitioner="metis")
    return root


def test_reader_opened_for_some_parts_needs_only_their_files(cora3, tmp_path):
    host = host_files(cora3, tmp_path / "host", [1])
    with pytest.raises(PartitionFormatError):
        PartitionReader(host)  # every part: part-0 is missing
    reader = PartitionReader(host, parts=[1])
    reader.verify_all()
    assert reader.load_part(1).num_nodes == \
        PartitionReader(cora3).load_part(1).num_nodes
    with pytest.raises(InvalidPartitionArgumentError, match="opened for parts"):
        reader.load_part(0)
    with pytest.raises(InvalidPartitionArgumentError):
        PartitionReader(host, parts=[3])


def test_group_endpoints_count_up_from_the_port():
    assert group_endpoints("tcp://0.0.0.0:7000", 3) == \
        ["tcp://0.0.0.0:7000", "tcp://0.0.0.0:7001", "tcp://0.0.0.0:7002"]
    assert group_endpoints("tcp://h:0", 2) == ["tcp://h:0", "tcp://h:0"]
    with pytest.raises(InvalidPartitionArgumentError):
        group_endpoints("tcp://h:65535", 2)


def test_group_refuses_a_repeated_part(cora3):
    with pytest.raises(InvalidPartitionArgumentError, match="twice"):
        ServerGroup(cora3, [0, 0])


def test_serve_two_parts_from_one_process_of_a_host_files(cora3, tmp_path, cora_data):
    """Two hosts' worth of files, one serving parts 0,1 and the other part 2:
    a trainer connected to the three endpoints (host:port, no tcp://) sees
    the whole graph."""
    host_a = host_files(cora3, tmp_path / "a", [0, 1])
    host_b = host_files(cora3, tmp_path / "b", [2])
    procs = []
    try:
        endpoints = []
        for root, parts in ((host_a, "0,1"), (host_b, "2")):
            proc = subprocess.Popen(
                [sys.executable, "-m", "pyg_dist", "serve", str(root), "--part", parts,
                 "--bind", "127.0.0.1:0", "--workers", "1"],
                stdout=subprocess.PIPE, text=True, start_new_session=True)
            procs.append(proc)
            line = proc.stdout.readline()
            assert line.startswith("ready "), line
            endpoints += line.split()[1:]
        assert len(endpoints) == 3 and len(set(endpoints)) == 3
        fs, gs = pyg_dist.connect([e.removeprefix("tcp://") for e in endpoints])
        with fs:
            ids = torch.arange(cora_data.num_nodes)
            assert torch.equal(fs[None, "x", ids], cora_data.x)
            assert torch.equal(fs[None, "y", ids], cora_data.y)
    finally:
        for proc in procs:
            stop_process_tree(proc)
            proc.stdout.close()


def test_serve_cli_refuses_a_bad_part_list(cora3):
    out = subprocess.run([sys.executable, "-m", "pyg_dist", "serve", str(cora3),
                          "--part", "0,0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "listed twice" in out.stderr
