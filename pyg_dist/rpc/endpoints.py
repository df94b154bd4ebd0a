"""Server addresses as users write them, checked before any socket exists.

A client connects to ``tcp://host:port`` (``host`` a name, an IPv4 address
or a bracketed IPv6 one) or ``ipc://path``. ``host:port`` alone means TCP and
is normalised to ``tcp://host:port``. Anything else is refused here, with a
typed error naming it, instead of by libzmq inside the client's I/O thread.
"""

from __future__ import annotations

import re

from pyg_dist.errors import RpcError

# A DNS name or IPv4 address, or a bracketed IPv6 address (with an optional
# %zone), then a port.
_TCP = re.compile(r"(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\])"
                  r":(?P<port>[0-9]{1,5})")
# Long enough for any real address; a longer one is shown cut.
_SHOWN = 200


def normalize_endpoint(address: object) -> str:
    """Returns ``address`` as a ZeroMQ endpoint a client can connect to.

    Args:
        address: ``tcp://host:port``, ``host:port`` (becomes
            ``tcp://host:port``) or ``ipc://path``; surrounding blanks are
            ignored.

    Returns:
        The endpoint, e.g. ``tcp://10.0.0.5:5555``.

    Raises:
        RpcError: if ``address`` is not a string or not one of the forms
            above, or its port is not in ``[1, 65535]``.
    """
    if not isinstance(address, str):
        raise RpcError(f"a server address must be a string like tcp://host:port, got a "
                       f"{type(address).__name__}")
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme == "ipc" and rest:
        return f"ipc://{rest}"
    match = _TCP.fullmatch(rest) if scheme == "tcp" else None
    if match is None:
        raise RpcError(f"cannot connect to server address {_show(text)}: expected "
                       f"tcp://host:port, host:port or ipc://path")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise RpcError(f"server address {_show(text)} has port {port}; a server listens "
                       f"on a port in [1, 65535]")
    return f"tcp://{rest}"


def _show(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")
