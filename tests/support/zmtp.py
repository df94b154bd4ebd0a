"""A raw TCP peer speaking just enough ZMTP 3 to misbehave.

A real ZeroMQ socket never puts an unfinished multipart message on the wire
(libzmq flushes only complete messages) and always finishes its handshake;
a hostile peer does neither. :class:`RawPeer` writes the greeting, the NULL
handshake and single frames by hand, so tests can send frames with the
more-flag set and never the last one, or announce a huge CURVE handshake
command and never finish it.
"""

from __future__ import annotations

import select
import socket
import struct
from urllib.parse import urlsplit

GREETING_BYTES = 64


def greeting(mechanism: bytes = b"NULL") -> bytes:
    """The 64-byte ZMTP 3.0 greeting of a client using ``mechanism``."""
    return (b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\0")
            + b"\0" + bytes(31))


def frame_header(size: int, more: bool = False, command: bool = False) -> bytes:
    """The flags and size of one frame (short form up to 255 bytes)."""
    flags = (1 if more else 0) | (4 if command else 0)
    if size <= 255:
        return bytes([flags, size])
    return bytes([flags | 2]) + struct.pack(">Q", size)


def ready_command(socket_type: bytes = b"DEALER") -> bytes:
    """The NULL mechanism's READY command announcing ``socket_type``."""
    name = b"Socket-Type"
    body = (b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(socket_type))
            + socket_type)
    return frame_header(len(body), command=True) + body


class RawPeer:
    """One TCP connection to a ZeroMQ endpoint, written to byte by byte.

    Args:
        endpoint: ``tcp://host:port`` of the server.
        mechanism: ``b"NULL"`` (the greeting and READY are sent at once) or
            ``b"CURVE"`` (only the greeting: the handshake is the test's).
        timeout: Seconds a send may block before it raises.
    """

    def __init__(self, endpoint: str, mechanism: bytes = b"NULL",
                 timeout: float = 10.0) -> None:
        url = urlsplit(endpoint)
        self.sock = socket.create_connection((url.hostname, url.port), timeout=timeout)
        self.sent = 0
        self.send(greeting(mechanism))
        if mechanism == b"NULL":
            self.send(ready_command())
            # libzmq takes every frame before its own READY went out as a
            # handshake command and drops the peer (unexpected command), so
            # messages may only follow the server's greeting and READY.
            self.recv_exactly(GREETING_BYTES)
            self.recv_command()

    def recv_exactly(self, size: int) -> bytes:
        """Receives exactly ``size`` bytes.

        Raises:
            ConnectionError: if the server closed the connection first.
        """
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError(f"the server closed the connection after "
                                      f"{len(data)} of {size} bytes")
            data += chunk
        return bytes(data)

    def recv_command(self) -> bytes:
        """Receives one command frame; returns its body."""
        flags, size = self.recv_exactly(2)
        if flags & 2:
            size = struct.unpack(">Q", bytes([size]) + self.recv_exactly(7))[0]
        if not flags & 4:
            raise ConnectionError(f"expected a command frame, got flags {flags:#x}")
        return self.recv_exactly(size)

    def send(self, data: bytes) -> None:
        """Sends ``data`` as is.

        Raises:
            OSError: once the server has cut the connection (broken pipe,
                reset) or the send blocked past the timeout.
        """
        self.sock.sendall(data)
        self.sent += len(data)

    def frames(self, size: int, count: int, more: bool = True) -> int:
        """Sends ``count`` frames of ``size`` zero bytes, each with the
        more-flag (so the message never ends); stops when the server cuts
        the connection (or a send blocks past the timeout). Returns how
        many frames went out."""
        chunk = frame_header(size, more) + bytes(size)
        for i in range(count):
            try:
                if not self._send_until_cut(chunk):
                    return i
            except OSError:
                return i
        return count

    def _send_until_cut(self, data: bytes) -> bool:
        """Sends ``data``; returns ``False`` as soon as the server has closed
        the connection. A cut server stops reading at once, but a blocked
        send learns of it only from TCP's zero-window probes, seconds later:
        waiting for the socket to be writable *or* readable sees the
        server's FIN instead.

        Raises:
            TimeoutError: if the socket stays unwritable for the timeout.
        """
        view = memoryview(data)
        timeout = self.sock.gettimeout()
        while view:
            readable, writable, _ = select.select([self.sock], [self.sock], [], timeout)
            if readable:
                try:
                    if not self.sock.recv(1 << 16):  # EOF: cut
                        return False
                except (ConnectionResetError, BrokenPipeError):
                    return False
                continue  # the server's own bytes (its greeting): skipped
            if not writable:
                raise TimeoutError(f"send blocked for {timeout} s")
            sent = self.sock.send(view)
            view = view[sent:]
            self.sent += sent
        return True

    def is_cut(self, wait: float = 5.0) -> bool:
        """Whether the server closed the connection (EOF or reset) within
        ``wait`` seconds; bytes the server sent (its greeting) are skipped."""
        self.sock.settimeout(wait)
        try:
            while True:
                if not self.sock.recv(1 << 16):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        """Closes the connection."""
        self.sock.close()

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
