"""What the kernel holds for a TCP port: bytes received and not yet read.

A stopped (SIGSTOP) server reads nothing, so the bytes a client sent it
pile up in its sockets' receive queues: a test that needs a request to have
*reached* such a server waits for them there (``/proc/net/tcp``), instead
of sleeping and hoping.
"""

from __future__ import annotations

from pathlib import Path

_ESTABLISHED = "01"


def unread_bytes(port: int) -> int:
    """Bytes waiting in the receive queues of the established connections
    whose local port is ``port`` (IPv4 and IPv6)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == _ESTABLISHED and int(local.rsplit(":", 1)[1], 16) == port:
                total += int(queues.split(":")[1], 16)
    return total
