"""Every CLI error is one line on stderr and a non-zero exit, never a traceback.

Real ``python -m pyg_dist`` processes on real files. Each case was a
traceback (or, for ``--bind ...:70000``, a server on the wrong port) before
the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.servers import serve_part

import pyg_dist
from pyg_dist.cli import main
from pyg_dist.cli.serve import bind_endpoint
from pyg_dist.datasets import cora
from pyg_dist.rpc import RpcClient, RpcConfig


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyg_dist", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))


def _one_line_error(out: subprocess.CompletedProcess, command: str, status: int) -> str:
    """Checks the one-line contract; returns the line."""
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == status, (out.returncode, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    if status == 2:  # argparse: usage line(s), then one error line
        assert lines[-1].startswith(f"pyg-dist {command}: error:"), out.stderr
        return lines[-1]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"pyg-dist {command}: error:"), out.stderr
    return lines[0]


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in: mode 0500 for a
    normal user; for root (who ignores modes) /sys, where nobody can."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir(mode=0o500)
        return path
    path = Path("/sys")
    try:
        os.mkdir(path / "pyg-dist-probe")
    except OSError:
        return path
    os.rmdir(path / "pyg-dist-probe")
    pytest.skip("no directory here refuses writes to root")


def test_partition_into_an_unwritable_root(tmp_path):
    root = unwritable_dir(tmp_path) / "new" / "ds"
    line = _one_line_error(_cli("partition", "pyg_dist.datasets:cora", str(root), "-n", "2",
                                "--no-progress"), "partition", 1)
    assert "cannot create the dataset directory" in line and str(root) in line


def test_partition_under_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = _one_line_error(_cli("partition", "pyg_dist.datasets:cora",
                                str(blocker / "ds"), "-n", "2", "--no-progress"),
                           "partition", 1)
    assert "cannot create the dataset directory" in line
    assert blocker.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["file"]


def test_keys_into_a_file(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("keep")
    line = _one_line_error(_cli("keys", str(target)), "keys", 1)
    assert "not a directory" in line
    assert target.read_text() == "keep"


def test_keys_into_an_unwritable_directory(tmp_path):
    target = unwritable_dir(tmp_path)
    line = _one_line_error(_cli("keys", str(target), "--name", "pyg-dist-test"), "keys", 1)
    assert "cannot write CURVE key files" in line
    assert not any("pyg-dist-test" in name for name in os.listdir(target))


def test_keys_into_a_directory_that_cannot_be_created(tmp_path):
    target = unwritable_dir(tmp_path) / "keys"
    line = _one_line_error(_cli("keys", str(target)), "keys", 1)
    assert "cannot create the key directory" in line


def _usage_error(capsys, *argv: str) -> str:
    """Runs ``main`` in process for an argparse error: exit 2, no traceback."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_serve_max_message_bytes_2_62_is_a_usage_error(tmp_path):
    """Was an OverflowError traceback (libzmq's MAXMSGSIZE is twice the limit)."""
    line = _one_line_error(_cli("serve", str(tmp_path), "--part", "0",
                                f"--max-message-bytes={2**62}"), "serve", 2)
    assert "--max-message-bytes: must lie in [1, 1099511627776]" in line


@pytest.mark.parametrize("option", ["--max-message-bytes", "--max-reply-bytes"])
@pytest.mark.parametrize("value", [str(2**62), str(2**63), "0", "-1", "1e9"])
def test_serve_byte_limits_out_of_range(tmp_path, capsys, option, value):
    line = _usage_error(capsys, "serve", str(tmp_path), "--part", "0", f"{option}={value}")
    assert line.startswith("pyg-dist serve: error: argument") and option in line


def test_serve_port_70000_is_refused_not_wrapped_to_4464(tmp_path):
    line = _one_line_error(_cli("serve", str(tmp_path), "--part", "0",
                                "--bind", "tcp://127.0.0.1:70000"), "serve", 2)
    assert "--bind: port must be an integer in [0, 65535]" in line


@pytest.mark.parametrize("bind, message", [
    ("127.0.0.1:65536", "[0, 65535]"),
    ("tcp://127.0.0.1:-1", "[0, 65535]"),
    ("tcp://127.0.0.1:", "[0, 65535]"),
    ("tcp://127.0.0.1", "HOST:PORT"),
    ("127.0.0.1", "HOST:PORT"),
    ("udp://127.0.0.1:5555", "only tcp://"),
    ("ipc:///tmp/x", "only tcp://"),
    ("tcp://a;b:5555", "host"),
    ("tcp://[zz]:5555", "IPv6"),
])
def test_serve_refuses_a_bad_bind_endpoint(tmp_path, capsys, bind, message):
    line = _usage_error(capsys, "serve", str(tmp_path), "--part", "0", f"--bind={bind}")
    assert "--bind" in line and message in line


@pytest.mark.parametrize("bind, normal", [
    ("127.0.0.1:5555", "tcp://127.0.0.1:5555"),
    ("tcp://0.0.0.0:0", "tcp://0.0.0.0:0"),
    ("*:007", "tcp://*:7"),
    ("[::1]:80", "tcp://[::1]:80"),
    ("localhost:65535", "tcp://localhost:65535"),
])
def test_bind_endpoints_are_normalised(bind, normal):
    assert bind_endpoint(bind) == normal


def test_serve_accepts_host_port_without_scheme(cora2_root):
    with serve_part(cora2_root, 0, serve_args=["--bind", "127.0.0.1:0"]) as (proc, endpoint):
        assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith(":0")
        with RpcClient([endpoint], RpcConfig(timeout=30)) as client:
            assert client.call(0, "meta").result["part"] == 0
        assert proc.poll() is None


def test_serve_on_a_missing_dataset(tmp_path):
    line = _one_line_error(_cli("serve", str(tmp_path / "none"), "--part", "0"), "serve", 1)
    assert "meta.json" in line


def test_serve_with_a_secret_key_that_is_a_directory(tmp_path, cora2_root):
    line = _one_line_error(_cli("serve", str(cora2_root), "--part", "0",
                                "--curve-secret-key", str(tmp_path)), "serve", 1)
    assert "key file" in line


def test_serve_threads_beyond_an_int_is_a_usage_error(tmp_path):
    """Was a traceback (torch.set_num_threads: 'Overflow when unpacking long')."""
    line = _one_line_error(_cli("serve", str(tmp_path), "--part", "0",
                                "--threads", "99999999999"), "serve", 2)
    assert "--threads: must lie in [1, 4096]" in line


def test_launch_errors_name_the_command_and_a_missing_script_is_an_error(cora2_root, capsys):
    """The launcher's script positional is called ``command``: it overwrote the
    sub-command's name, so errors read ``pyg-dist ['x.py']: error`` and a
    launch without a script printed the top-level help."""
    assert main(["launch", str(cora2_root), "--nproc", "0", "--", "x.py"]) == 1
    assert capsys.readouterr().err.startswith("pyg-dist launch: error: --nproc must be >= 1")
    assert main(["launch", str(cora2_root)]) == 1
    assert capsys.readouterr().err.startswith("pyg-dist launch: error: no script given")


def test_partition_root_with_a_nul_byte_is_a_typed_error(tmp_path):
    from pyg_dist.errors import InvalidPartitionArgumentError

    with pytest.raises(InvalidPartitionArgumentError, match="NUL"):
        pyg_dist.partition(cora(), 2, str(tmp_path / "a\0b"), "random")
