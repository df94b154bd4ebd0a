"""CURVE keys: who may talk to a partition server.

ZeroMQ's CURVE mechanism encrypts traffic and authenticates both ends. A
partition server holds a secret key; a client must know the server's
*public* key to complete the handshake at all, and, when the server is given
a directory of authorised client public keys, must also hold one of the
matching client secret keys. A client without the right keys gets nothing:
the handshake fails and no request reaches the server.

Keys are pyzmq's certificate files (``NAME.key`` public, ``NAME.key_secret``
secret, the latter readable by its owner only from the moment it exists),
made by ``pyg-dist keys``.
CURVE is off by default on loopback; turn it on for any server that listens
on a cluster network (see ``docs/reliability.md``).
"""

from __future__ import annotations

import datetime
import errno
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import zmq
import zmq.auth

from pyg_dist.errors import PygDistError

if TYPE_CHECKING:  # imported lazily at run time: keeps ``pyg-dist keys`` light
    from pyg_dist.rpc.config import RpcConfig


class KeyFileError(PygDistError, ValueError):
    """A CURVE key file is missing, unreadable or not a key of the right kind."""


@dataclass(frozen=True)
class CurveKeyPair:
    """A public key and, for the side that owns it, the secret key (Z85 bytes)."""

    public: bytes
    secret: Optional[bytes] = None


def generate_keys(directory: str | os.PathLike, name: str, *, overwrite: bool = False
                  ) -> tuple[Path, Path]:
    """Writes ``NAME.key`` and ``NAME.key_secret`` into ``directory``.

    The secret never exists with more than owner permissions, not even for
    an instant: each file is written under a fresh temporary name opened with
    ``O_CREAT | O_EXCL`` and mode 0600 (the umask can only remove bits), then
    linked or renamed onto its final name. A failure removes what this call
    wrote; no partial or mismatched pair is left.

    Args:
        directory: Where to write. Created with mode 0700 if missing; an
            existing directory must not be writable by group or others (they
            could swap the files).
        name: Base name of the two files, e.g. ``server`` or ``trainer``.
        overwrite: Replace existing files of that name.

    Returns:
        The public and the secret key file paths.

    Raises:
        KeyFileError: if CURVE is unavailable, the name is not a plain file
            name, the directory cannot be created or written, is a file, is
            writable by others, or the files exist and ``overwrite`` is off.
    """
    if not zmq.has("curve"):
        raise KeyFileError("this libzmq was built without CURVE support; install a pyzmq "
                           "wheel (it bundles libzmq with CURVE)")
    if not _plain_name(name):
        raise KeyFileError("invalid key name: use a plain file name like 'server' (letters, "
                           "digits, '-', '_', '.', not starting with '.', at most 200)")
    out = _key_directory(Path(directory))
    public, secret = out / f"{name}.key", out / f"{name}.key_secret"
    if not overwrite and (public.exists() or secret.exists()):
        raise KeyFileError(f"{public} or {secret} exists already; pass overwrite=True "
                           f"(--overwrite) to replace it, or choose another name")
    public_key, secret_key = zmq.curve_keypair()
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    written: list[Path] = []
    try:
        # Secret first: a pair whose public half is missing is harmless, the
        # other way round a trainer could trust a public key with no secret.
        for path, text, mode in (
                (secret, _key_text(stamp, public_key, secret_key), 0o600),
                (public, _key_text(stamp, public_key, None), 0o644)):
            _install(path, text, mode, overwrite)
            written.append(path)
    except OSError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        raise KeyFileError(f"cannot write CURVE key files into {out}: "
                           f"{exc.strerror or exc}") from exc
    return public, secret


def _plain_name(name: object) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= 200 and not name.startswith(".")
            and all(c.isalnum() or c in "-_." for c in name))


def _key_directory(out: Path) -> Path:
    """Creates ``out`` with mode 0700, or checks that an existing one is a
    directory that only its owner can write."""
    try:
        out.mkdir(mode=0o700, parents=True)
        # mkdir's mode passes through the umask; set it exactly.
        out.chmod(0o700)
        return out
    except FileExistsError:
        pass
    except OSError as exc:
        raise KeyFileError(f"cannot create the key directory {out}: "
                           f"{exc.strerror or exc}") from exc
    try:
        info = out.stat()
    except OSError as exc:
        raise KeyFileError(f"cannot use {out} as key directory: {exc.strerror or exc}") \
            from exc
    if not stat.S_ISDIR(info.st_mode):
        raise KeyFileError(f"{out} exists and is not a directory; give a directory to "
                           f"write the key files into")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise KeyFileError(
            f"{out} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}), "
            f"who could replace the key files; use a directory only you can write "
            f"(chmod 700 {out}) or a new one")
    return out


def _key_text(stamp: str, public_key: bytes, secret_key: Optional[bytes]) -> str:
    """A certificate in pyzmq's format (``zmq.auth.load_certificate`` reads it)."""
    kind = "Secret" if secret_key else "Public"
    lines = [f"#   ****  Generated on {stamp} by pyg-dist  ****",
             f"#   ZeroMQ CURVE {kind} Certificate", "", "metadata", "curve",
             f'    public-key = "{public_key.decode()}"']
    if secret_key:
        lines.insert(2, "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its "
                        "permissions.")
        lines.append(f'    secret-key = "{secret_key.decode()}"')
    return "\n".join(lines) + "\n"


def _install(path: Path, text: str, mode: int, overwrite: bool) -> None:
    """Writes ``text`` to a new 0600 temporary file beside ``path``, sets
    ``mode`` and moves it onto ``path`` (without replacing unless asked)."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _link_new(tmp: Path, path: Path) -> None:
    """Gives ``tmp`` the name ``path`` unless that name exists."""
    try:
        # link() fails if the name exists: no check-then-write race.
        os.link(tmp, path)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP) or path.exists():
            raise
        # A file system without hard links: rename after a check instead.
        os.rename(tmp, path)


def load_keys(path: str | os.PathLike, *, need_secret: bool = False) -> CurveKeyPair:
    """Loads a key pair from a ``.key`` or ``.key_secret`` file.

    Args:
        path: The certificate file.
        need_secret: Fail unless the file holds a secret key.
    """
    p = Path(path)
    try:
        public, secret = zmq.auth.load_certificate(str(p))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read CURVE key file {p}: {exc}; create keys with "
                           f"'pyg-dist keys DIR --name NAME'") from exc
    if need_secret and not secret:
        raise KeyFileError(f"{p} holds only a public key; pass the '.key_secret' file")
    return CurveKeyPair(public=public, secret=secret)


def ephemeral_client_keys() -> CurveKeyPair:
    """A fresh client key pair, for servers that only check that the client
    knows their public key (no authorised-keys directory)."""
    public, secret = zmq.curve_keypair()
    return CurveKeyPair(public=public, secret=secret)


def client_config(server_key: str | os.PathLike, client_key: str | os.PathLike | None = None,
                  *, base: Optional[RpcConfig] = None) -> RpcConfig:
    """An :class:`~pyg_dist.rpc.config.RpcConfig` that talks CURVE to a server.

    ``fs, gs = pyg_dist.connect(addresses, client_config("server.key",
    "trainer.key_secret"))`` is all a trainer needs.

    Args:
        server_key: The server's public ``.key`` file (its ``.key_secret``
            works too; only the public half is used).
        client_key: This client's ``.key_secret`` file, needed when the
            server admits only authorised clients. ``None`` uses a fresh
            key pair, enough for a server without an authorised-keys
            directory.
        base: Deadlines and limits to start from; the defaults plus the
            environment (:func:`~pyg_dist.rpc.config.default_config`) if
            ``None``.

    Raises:
        KeyFileError: if a key file is missing or of the wrong kind.
    """
    from pyg_dist.rpc.config import default_config

    server = load_keys(server_key)
    client = load_keys(client_key, need_secret=True) if client_key is not None \
        else ephemeral_client_keys()
    return (base or default_config()).replace(
        server_public_key=server.public.decode(),
        client_public_key=client.public.decode(),
        client_secret_key=client.secret.decode())  # type: ignore[union-attr]


def server_config(secret_key: str | os.PathLike,
                  authorized_keys: str | os.PathLike | None = None, *,
                  base: Optional[RpcConfig] = None) -> RpcConfig:
    """An :class:`~pyg_dist.rpc.config.RpcConfig` that serves with CURVE.

    The in-process twin of ``pyg-dist serve --curve-secret-key FILE
    --curve-authorized-keys DIR``.

    Args:
        secret_key: The server's ``.key_secret`` file.
        authorized_keys: A directory of client public ``.key`` files; only
            those clients are admitted. ``None`` admits any client that
            knows the server's public key.
        base: Deadlines and limits to start from (defaults plus environment
            if ``None``).

    Raises:
        KeyFileError: if the key file is missing or holds no secret key, or
            the directory does not exist.
    """
    from pyg_dist.rpc.config import default_config

    keys = load_keys(secret_key, need_secret=True)
    directory = None
    if authorized_keys is not None:
        if not Path(authorized_keys).is_dir():
            raise KeyFileError(f"authorised keys directory {authorized_keys} does not "
                               f"exist; create it and copy the clients' public .key files "
                               f"into it")
        directory = str(authorized_keys)
    return (base or default_config()).replace(
        server_secret_key=keys.secret.decode(),  # type: ignore[union-attr]
        server_public_key=keys.public.decode(), authorized_keys_dir=directory)


def client_env(server_key: str | os.PathLike,
               client_key: str | os.PathLike | None = None) -> dict[str, str]:
    """Environment variables that make every trainer process talk CURVE.

    ``pyg_dist.connect()`` builds its configuration from the environment
    when given none, so exporting these before ``pyg-dist launch`` (or
    ``torchrun``) turns CURVE on without touching the training script.

    Args:
        server_key: The server's public ``.key`` file.
        client_key: This client's ``.key_secret`` file, or ``None`` for a
            fresh key pair per process.

    Returns:
        ``{"PYG_DIST_SERVER_PUBLIC_KEY": ..., ...}`` (Z85 key text).
    """
    from pyg_dist.rpc.config import ENV_VARS

    server = load_keys(server_key)
    env = {ENV_VARS["server_public_key"]: server.public.decode()}
    if client_key is not None:
        client = load_keys(client_key, need_secret=True)
        env[ENV_VARS["client_public_key"]] = client.public.decode()
        env[ENV_VARS["client_secret_key"]] = client.secret.decode()  # type: ignore[union-attr]
    return env
