"""`pyg-dist keys` writes loadable CURVE key pairs and protects the secret.

The secret must never be observable with group or other permission bits,
not even for an instant: pyzmq's writer created it 0644 (umask 022) and
chmodded it afterwards, and another local user read it in 5 of 30 runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyg_dist.rpc.auth import KeyFileError, load_keys


def _keys(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyg_dist", "keys", *args],
                          capture_output=True, text=True, timeout=60)


def test_generates_a_pair_that_loads(tmp_path):
    out = _keys(str(tmp_path), "--name", "trainer")
    assert out.returncode == 0, out.stderr
    pair = load_keys(tmp_path / "trainer.key_secret", need_secret=True)
    assert len(pair.public) == 40 and len(pair.secret) == 40
    assert load_keys(tmp_path / "trainer.key").public == pair.public
    mode = stat.S_IMODE((tmp_path / "trainer.key_secret").stat().st_mode)
    assert mode == 0o600


def test_refuses_to_overwrite_without_flag(tmp_path):
    assert _keys(str(tmp_path)).returncode == 0
    first = (tmp_path / "server.key").read_text()
    again = _keys(str(tmp_path))
    assert again.returncode == 1 and "exists already" in again.stderr
    assert (tmp_path / "server.key").read_text() == first
    assert _keys(str(tmp_path), "--overwrite").returncode == 0
    assert (tmp_path / "server.key").read_text() != first


def test_public_file_is_not_a_secret(tmp_path):
    _keys(str(tmp_path))
    with pytest.raises(KeyFileError, match="only a public key"):
        load_keys(tmp_path / "server.key", need_secret=True)
    with pytest.raises(KeyFileError, match="cannot read"):
        load_keys(tmp_path / "missing.key")


def test_config_helpers_load_key_files(tmp_path):
    from pyg_dist.rpc import RpcConfig
    from pyg_dist.rpc.auth import client_config, client_env, generate_keys, server_config

    generate_keys(tmp_path, "server")
    generate_keys(tmp_path, "trainer")
    server = load_keys(tmp_path / "server.key_secret")
    trainer = load_keys(tmp_path / "trainer.key_secret")
    cfg = client_config(tmp_path / "server.key", tmp_path / "trainer.key_secret",
                        base=RpcConfig(timeout=3.0))
    assert cfg.timeout == 3.0 and cfg.curve_client and not cfg.curve_server
    assert cfg.server_public_key == server.public.decode()
    assert cfg.client_secret_key == trainer.secret.decode()
    ephemeral = client_config(tmp_path / "server.key")
    assert ephemeral.client_secret_key not in (None, trainer.secret.decode())
    srv = server_config(tmp_path / "server.key_secret", tmp_path)
    assert srv.curve_server and srv.server_public_key == server.public.decode()
    assert srv.authorized_keys_dir == str(tmp_path)
    env = client_env(tmp_path / "server.key", tmp_path / "trainer.key_secret")
    assert RpcConfig.from_env(env).client_public_key == trainer.public.decode()
    with pytest.raises(KeyFileError, match="only a public key"):
        client_config(tmp_path / "server.key", tmp_path / "trainer.key")
    with pytest.raises(KeyFileError, match="only a public key"):
        server_config(tmp_path / "server.key")
    with pytest.raises(KeyFileError, match="does not exist"):
        server_config(tmp_path / "server.key_secret", tmp_path / "nowhere")


# The race ####################################################################

# Runs `pyg-dist keys` in a process whose audit hook, at every audited call
# (open, chmod, link, rename, ...), looks at every file of the key directory
# whose name holds "secret": any group/other permission bit is a reader's
# chance. The hook sees the state just before each call, so the old writer
# (open 0644, write, chmod 0600) is caught at its chmod every time.
_AUDITED_KEYS = textwrap.dedent("""
    import os, stat, sys

    directory, rounds = sys.argv[1], int(sys.argv[2])
    os.umask(0)  # the worst umask: only the code's own mode protects the file
    import pyg_dist.cli
    for module in ("pyg_dist.rpc.auth", "pyg_dist.auth"):
        try:
            __import__(module)
        except ImportError:
            pass
    exposed, looks, busy = [], 0, False

    def look(event, args):
        global busy, looks
        if busy or not os.path.isdir(directory):
            return
        busy = True
        try:
            looks += 1
            for entry in os.scandir(directory):
                if "secret" in entry.name:
                    try:
                        mode = stat.S_IMODE(os.lstat(entry.path).st_mode)
                    except FileNotFoundError:
                        continue
                    if mode & 0o077:
                        exposed.append(f"{entry.name} {mode:o} at {event}")
        finally:
            busy = False

    sys.addaudithook(look)
    for i in range(rounds):
        assert pyg_dist.cli.main(["keys", directory, "--name", f"k{i}"]) == 0
    print(looks, len(exposed), exposed[:3])
""")


def test_secret_never_exists_with_group_or_other_bits(tmp_path):
    """Failed on the old code: every round exposed the secret (0666 under
    umask 0) right before its chmod."""
    directory = tmp_path / "keys"
    out = subprocess.run([sys.executable, "-c", _AUDITED_KEYS, str(directory), "20"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    looks, exposed, examples = out.stdout.splitlines()[-1].split(maxsplit=2)
    assert int(looks) > 20 * 3  # the hook really looked during every write
    assert int(exposed) == 0, examples
    for i in range(20):
        assert stat.S_IMODE((directory / f"k{i}.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not [p for p in os.listdir(directory) if ".tmp-" in p]


def test_new_key_directory_is_private_and_a_shared_one_is_refused(tmp_path):
    nested = tmp_path / "a" / "keys"
    assert _keys(str(nested)).returncode == 0
    assert stat.S_IMODE(nested.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    for mode in (0o775, 0o757, 0o1777):
        shared.chmod(mode)
        out = _keys(str(shared))
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert "writable by group or others" in out.stderr
        assert os.listdir(shared) == []


def test_failed_writes_leave_no_partial_files(tmp_path):
    directory = tmp_path / "keys"
    assert _keys(str(directory)).returncode == 0
    before = sorted(os.listdir(directory))
    # The secret exists, the public file is gone: without --overwrite the
    # pair is refused and nothing is added or changed.
    secret = (directory / "server.key_secret").read_text()
    (directory / "server.key").unlink()
    out = _keys(str(directory))
    assert out.returncode == 1 and "exists already" in out.stderr
    assert sorted(os.listdir(directory)) == [n for n in before if n != "server.key"]
    assert (directory / "server.key_secret").read_text() == secret


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "../up", "x" * 300, "a\nb"])
def test_bad_key_names_are_refused(tmp_path, name):
    out = _keys(str(tmp_path / "keys"), "--name", name)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "invalid key name" in out.stderr
    assert not (tmp_path / "keys").exists() or os.listdir(tmp_path / "keys") == []


def test_keys_written_by_pyg_dist_load_with_pyzmq(tmp_path):
    import zmq.auth

    from pyg_dist.rpc.auth import generate_keys

    public, secret = generate_keys(Path(tmp_path) / "k", "server")
    assert zmq.auth.load_certificate(str(secret))[1] is not None
    assert zmq.auth.load_certificate(str(public)) == (
        zmq.auth.load_certificate(str(secret))[0], None)
