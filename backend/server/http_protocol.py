"""uvicorn's h11 protocol with a deadline on the request head.

uvicorn (0.55.0, protocols/http/h11_impl.py) has no header read timeout: its only timer,
`timeout_keep_alive` (default 5 s), is armed after a response ends and disarmed by the
next byte received (`data_received` calls `_unset_keepalive_if_required`). A connection
that sends a few random bytes, or a request head that never ends, is held until the
client gives up: h11 (0.16) refuses at once only a first byte no request line starts
with, else once the head passes `h11_max_incomplete_event_size` (16 KiB); uvicorn's docs
(uvicorn.org/server-behavior) name no other timeout than keep-alive.
Here a connection must deliver a whole request head within HEADER_TIMEOUT_S of opening,
or of its previous response ending; otherwise it is closed with one log line."""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 5.0  # as uvicorn's timeout_keep_alive: a head takes a few ms on any real link


class HeadTimeoutH11Protocol(H11Protocol):
    """H11Protocol that closes a connection whose request head is not complete in time."""

    head_timeout_s = HEADER_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0  # received while waiting for a head

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start the next (pipelined) request
        if not self.transport.is_closing():
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        waiting = self._head_timer is not None
        if waiting:
            self._head_bytes += len(data)
        super().data_received(data)
        if waiting and self._request_started():
            self._disarm_head_timer()

    def _request_started(self) -> bool:
        """A request head has arrived since the timer was armed: a cycle not yet answered."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_bytes = 0
        if self._request_started():  # a pipelined request already running
            return
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._request_started():
            return
        fresh = self.cycle is None
        if self._head_bytes or fresh:  # an idle keep-alive connection closes silently, as uvicorn's
            who = "%s:%d" % self.client if self.client else "a client"
            what = f"{self._head_bytes} bytes of an incomplete request head" if self._head_bytes else "nothing"
            self.logger.warning("closed the connection of %s: it sent %s in %.0f s", who, what, self.head_timeout_s)
        self.transport.close()
