"""Lines a server rejects (400/422) or a body too large for it (413): split the body until the
rejected lines are isolated, keep each in the dead-letter file with the server's message, and
log once per episode of rejections with counts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import aiofiles

from sinks.influxdb.http import REJECT, TOO_LARGE, Failure

__all__ = ["DeadLetter", "bisect", "lines_of"]

log = logging.getLogger("sinks.influxdb")


def lines_of(body: bytes) -> list[bytes]:
    return [line for line in body.split(b"\n") if line]


async def bisect(
    post: Callable[[bytes], Awaitable[None]], body: bytes, first: Failure
) -> list[tuple[bytes, Failure]]:
    """Post halves of ``body`` depth-first, left before right (good lines keep their order),
    until each rejected line stands alone; returns those with the server's answer. A failure
    that is not about the lines (RETRY, SETTINGS) propagates: the body stays for later."""
    rejected: list[tuple[bytes, Failure]] = []
    stack: list[tuple[list[bytes], Failure | None]] = [(lines_of(body), first)]
    while stack:
        lines, why = stack.pop()
        if why is None:
            try:
                await post(b"\n".join(lines) + b"\n")
                continue
            except Failure as exc:
                if exc.kind not in (REJECT, TOO_LARGE):
                    raise
                why = exc
        if len(lines) == 1:
            rejected.append((lines[0], why))
            continue
        mid = len(lines) // 2
        stack.append((lines[mid:], None))
        stack.append((lines[:mid], None))
    return rejected


class DeadLetter:
    """The dead-letter file: ``# <UTC time> HTTP <status>: <message>`` then the line."""

    def __init__(self, path: Path, where: Callable[[], str]) -> None:
        self.path = path
        self._where = where
        self.points = 0
        self._episode = 0
        self._rejecting = False

    async def keep(self, rejected: list[tuple[bytes, Failure]]) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        text = b"".join(
            f"# {stamp} HTTP {why.status}: {' '.join(str(why).split())}\n".encode() + line + b"\n"
            for line, why in rejected
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        async with aiofiles.open(self.path, "ab") as f:
            await f.write(text)
        self.points += len(rejected)
        self._episode += len(rejected)
        if not self._rejecting:
            self._rejecting = True
            why = rejected[0][1]
            log.warning(
                "influxdb %s: HTTP %d rejected %d line(s) (kept in %s): %s; further rejected "
                "lines are counted in dead_lettered_points and logged as a total once writes "
                "are accepted again",
                self._where(),
                why.status,
                len(rejected),
                self.path,
                " ".join(str(why).split()),
            )

    def clean(self) -> None:
        """A body was written without a rejection: the episode, if any, ends."""
        if not self._rejecting:
            return
        self._rejecting = False
        log.warning(
            "influxdb %s: writes are accepted again; %d line(s) were rejected in all (kept in %s)",
            self._where(),
            self._episode,
            self.path,
        )
        self._episode = 0
