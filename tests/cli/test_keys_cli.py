"""`pyg-dist keys` writes loadable CURVE key pairs and protects the secret."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest

from pyg_dist.auth import KeyFileError, load_keys


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
    from pyg_dist.auth import client_config, client_env, generate_keys, server_config
    from pyg_dist.rpc import RpcConfig

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
