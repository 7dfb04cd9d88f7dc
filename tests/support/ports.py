"""Ports on loopback: a free one for a server a test starts, a closed one that refuses."""

from __future__ import annotations

import random
import socket

# Outside Linux's ephemeral range (32768-60999): a port from that range can be taken by
# an outgoing connection between this check and the server's bind.
LOW, HIGH = 20000, 32767


def free_port() -> int:
    for port in random.sample(range(LOW, HIGH), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOW} and {HIGH}")


def closed_port() -> int:
    """A port nothing listens on (bound, then let go): a connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
