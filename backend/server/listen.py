"""The server's listening socket, bound before anything heavy loads (the model, torch):
the port it prints is the one it listens on, and an address that cannot be bound is a
one-line error at once."""
from __future__ import annotations

import errno
import socket


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now (before the model loads), so that the port it
    prints is the one it listens on (port 0: one the system picks); ValueError, in one
    line, if host:port cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    except (OSError, OverflowError) as e:
        s.close()
        why = ("is in use" if getattr(e, "errno", None) == errno.EADDRINUSE
               else f"cannot be bound ({getattr(e, 'strerror', None) or e})")
        raise ValueError(f"{host}:{port} {why}") from None
    return s


def bound_port(sock: socket.socket) -> int:
    return sock.getsockname()[1]
