"""Server lists from the argument, PYG_DIST_SERVERS or PYG_DIST_SERVERS_FILE."""

from __future__ import annotations

import pytest

import pyg_dist
from pyg_dist.discovery import SERVERS_ENV, SERVERS_FILE_ENV, server_groups
from pyg_dist.errors import ServerListError


def server_addresses(addresses=None, environ=None):
    """The server list of a cluster without replicas, flat."""
    return [endpoint for group in server_groups(addresses, environ) for endpoint in group]


def test_host_port_without_scheme_is_tcp():
    assert server_addresses("10.0.0.5:5555, tcp://b:1 ,ipc:///tmp/s") == \
        ["tcp://10.0.0.5:5555", "tcp://b:1", "ipc:///tmp/s"]


def test_environment_wins_over_the_file(tmp_path):
    listed = tmp_path / "servers"
    listed.write_text("c:3\n")
    env = {SERVERS_ENV: "a:1,b:2", SERVERS_FILE_ENV: str(listed)}
    assert server_addresses(environ=env) == ["tcp://a:1", "tcp://b:2"]


def test_file_with_comments_blanks_and_commas(tmp_path):
    listed = tmp_path / "servers"
    listed.write_text("# written by the job\nnode1:5555 node1:5556\n\n node2:5555, # part 2\n")
    assert server_addresses(environ={SERVERS_FILE_ENV: str(listed)}) == \
        ["tcp://node1:5555", "tcp://node1:5556", "tcp://node2:5555"]


@pytest.mark.parametrize("content, match", [
    ("a:1\nnot an address\n", r"line 2"),
    ("a:1\na:1\n", r"repeats"),
    ("a:99999\n", r"port 99999"),
    ("# nothing\n", r"empty"),
    (b"\xff\xfe", r"not UTF-8"),
])
def test_bad_file_names_what_and_where(tmp_path, content, match):
    listed = tmp_path / "servers"
    (listed.write_bytes if isinstance(content, bytes) else listed.write_text)(content)
    with pytest.raises(ServerListError, match=match) as info:
        server_addresses(environ={SERVERS_FILE_ENV: str(listed)})
    assert SERVERS_FILE_ENV in str(info.value)


def test_missing_file_and_no_list_at_all(tmp_path):
    with pytest.raises(ServerListError, match="cannot read"):
        server_addresses(environ={SERVERS_FILE_ENV: str(tmp_path / "absent")})
    with pytest.raises(ServerListError, match=SERVERS_FILE_ENV):
        server_addresses(environ={})


def test_oversized_file_is_refused_unparsed(tmp_path):
    listed = tmp_path / "servers"
    listed.write_bytes(b"a:1\n" * (1 << 19))
    with pytest.raises(ServerListError, match="over"):
        server_addresses(environ={SERVERS_FILE_ENV: str(listed)})


def test_connect_reads_the_file(served_cora, tmp_path, monkeypatch):
    fs, _ = served_cora.get(2)
    endpoints = fs.router.endpoints
    listed = tmp_path / "servers"
    listed.write_text("\n".join(e.removeprefix("tcp://") for e in endpoints))
    monkeypatch.delenv(SERVERS_ENV, raising=False)
    monkeypatch.setenv(SERVERS_FILE_ENV, str(listed))
    fs2, _ = pyg_dist.connect()
    with fs2:
        assert fs2[None, "y", None].numel() == served_cora.data.num_nodes


def test_replica_groups_from_a_list_the_environment_and_a_file(tmp_path):
    assert server_groups([["a:1", "tcp://a2:1"], "b:2"]) == \
        [["tcp://a:1", "tcp://a2:1"], ["tcp://b:2"]]
    assert server_groups(None, {"PYG_DIST_SERVERS": "a:1|a2:1, b:2"}) == \
        [["tcp://a:1", "tcp://a2:1"], ["tcp://b:2"]]
    listed = tmp_path / "servers.txt"
    listed.write_text("# part 0, two replicas\na:1|a2:1\nb:2\n")
    assert server_groups(None, {"PYG_DIST_SERVERS_FILE": str(listed)}) == \
        [["tcp://a:1", "tcp://a2:1"], ["tcp://b:2"]]


@pytest.mark.parametrize("given, match", [
    ("a:1||a2:1,b:2", "empty member"),
    ([["a:1"], []], "is empty"),
    ("a:1|a:1,b:2", "repeats"),
    ("a:1|nope,b:2", "nope"),
])
def test_bad_replica_groups_are_refused(given, match):
    with pytest.raises(ServerListError, match=match):
        server_groups(given)
