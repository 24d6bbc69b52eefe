"""Spool appends in the order points left the core's queue.

Every body gets a ticket when its points leave the core's queue (``write`` at its start,
``spill`` at once). A body is *placed* when it was delivered directly, or appended to the spool;
bodies to spool wait until every earlier ticket is placed. So a batch spilled while an older one
is still being encoded or posted lands behind it, and a failed direct post lands before anything
spilled after it started. A body posted directly is *held* too: should its post be cancelled
before it even started, it is spooled at close with the rest, in order.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TicketOrder"]

Body = tuple[bytes, int]
"""Line protocol and its number of points."""


class TicketOrder:
    """Tickets in, spool appends (through ``append``) out, in ticket order."""

    def __init__(self, append: Callable[[bytes, int], None]) -> None:
        self._append = append
        self._next = 0
        self._placed = 0
        self._pending: dict[int, Body | None] = {}
        self._held: dict[int, Body] = {}

    def take(self) -> int:
        ticket = self._next
        self._next += 1
        return ticket

    @property
    def waiting(self) -> bool:
        """Bodies wait for an earlier ticket."""
        return bool(self._pending)

    def hold(self, ticket: int, body: Body) -> None:
        """``ticket``'s body, posted directly: spooled at close unless ``ticket`` is placed
        before (a post cancelled before it started never places it)."""
        self._held[ticket] = body

    def place(self, ticket: int, body: Body | None) -> None:
        """``ticket`` is settled: ``None`` when delivered or spooled already, else a body to
        spool once every earlier ticket is placed."""
        self._held.pop(ticket, None)
        self._pending[ticket] = body
        while self._placed in self._pending:
            ready = self._pending.pop(self._placed)
            self._placed += 1
            if ready is not None:
                self._append(*ready)

    def place_all(self) -> None:
        """At close: spool whatever still waits, and every body still held, in order."""
        for ticket in sorted({*self._pending, *self._held}):
            ready = self._pending.pop(ticket) if ticket in self._pending else self._held[ticket]
            if ready is not None:
                self._append(*ready)
        self._held.clear()
        self._placed = self._next
