"""``pyg-dist keys``: generate a CURVE key pair for servers or trainers."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist keys``."""
    p = sub.add_parser(
        "keys",
        help="generate a CURVE key pair (encryption and authentication on the wire)",
        description=(
            "Writes DIR/NAME.key (public: give it to the other side) and "
            "DIR/NAME.key_secret (secret: keep it). The secret file is created with mode "
            "0600 and never exists with wider permissions; DIR is created with mode 0700, "
            "and an existing DIR that group or others can write is refused. Give a server "
            "its secret "
            "key with 'pyg-dist serve --curve-secret-key'; a trainer needs the server's "
            "public key and, if the server only admits authorised clients "
            "(--curve-authorized-keys DIR), its own secret key."))
    p.add_argument("directory", help="directory to write the key files into (created 0700)")
    p.add_argument("--name", default="server", help="base name of the key files")
    p.add_argument("--overwrite", action="store_true", help="replace existing key files")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Generates the key pair and prints where it went."""
    from pyg_dist.rpc.auth import generate_keys

    public, secret = generate_keys(args.directory, args.name, overwrite=args.overwrite)
    print(f"public key: {public}")
    print(f"secret key: {secret}")
    return 0
