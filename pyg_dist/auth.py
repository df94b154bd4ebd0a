"""CURVE keys: who may talk to a partition server.

ZeroMQ's CURVE mechanism encrypts traffic and authenticates both ends. A
partition server holds a secret key; a client must know the server's
*public* key to complete the handshake at all, and, when the server is given
a directory of authorised client public keys, must also hold one of the
matching client secret keys. A client without the right keys gets nothing:
the handshake fails and no request reaches the server.

Keys are pyzmq's certificate files (``NAME.key`` public, ``NAME.key_secret``
secret, the latter readable by its owner only), made by ``pyg-dist keys``.
CURVE is off by default on loopback; turn it on for any server that listens
on a cluster network (see ``docs/reliability.md``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import zmq
import zmq.auth

from pyg_dist.errors import PygDistError


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

    Args:
        directory: Where to write (created if missing).
        name: Base name of the two files, e.g. ``server`` or ``trainer``.
        overwrite: Replace existing files of that name.

    Returns:
        The public and the secret key file paths.
    """
    if not zmq.has("curve"):
        raise KeyFileError("this libzmq was built without CURVE support; install a pyzmq "
                           "wheel (it bundles libzmq with CURVE)")
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"invalid key name {name!r}: use a plain file name like 'server'")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    public, secret = out / f"{name}.key", out / f"{name}.key_secret"
    if not overwrite and (public.exists() or secret.exists()):
        raise KeyFileError(f"{public} or {secret} exists already; pass overwrite=True "
                           f"(--overwrite) to replace it, or choose another name")
    zmq.auth.create_certificates(str(out), name)
    secret.chmod(0o600)
    return public, secret


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
