"""The live status line: the terminal's bottom row, kept out of the job's way.

The line is drawn only when stderr is a terminal. The rows above it become the terminal's scroll
region (DECSTBM), so the job's own output scrolls there and never runs into the status line;
each redraw is one ``write`` (save cursor, go to the last row, draw, restore cursor) so it cannot
interleave with the job's output. ``rich`` renders the text (styles, cut to the terminal width);
it is imported only here, when a live line is shown.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = ["LiveLine", "live_line_wanted"]

_SAVE, _RESTORE = "\x1b7", "\x1b8"


def live_line_wanted(stream: TextIO, quiet: bool) -> bool:
    """A live line on ``stream``: only on a terminal that can move its cursor, unless quiet."""
    if quiet or os.environ.get("TERM", "") in ("", "dumb"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class LiveLine:
    """Redraws ``render()`` on the last row of the terminal every ``period_s``."""

    def __init__(
        self, render: Callable[[], str], stream: TextIO | None = None, period_s: float = 1.0
    ) -> None:
        self.render = render
        self.stream = stream or sys.stderr
        self.period_s = period_s
        self._rows = 0

    def _size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (OSError, ValueError):
            return 24, 80
        return size.lines, size.columns

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _reserve(self, rows: int) -> str:
        """Make the rows above the last one the scroll region (the cursor stays where it was,
        one row up if it sat on the last row)."""
        return f"\n{_SAVE}\x1b[1;{rows - 1}r{_RESTORE}\x1b[1A"

    def start(self) -> None:
        rows, _ = self._size()
        if rows < 3:
            return
        self._rows = rows
        self._write(self._reserve(rows))

    def draw(self) -> None:
        rows, cols = self._size()
        if rows < 3:
            return
        prefix = ""
        if rows != self._rows:  # the terminal was resized
            prefix = self._reserve(rows)
            self._rows = rows
        text = _render(self.render(), cols)
        self._write(f"{prefix}{_SAVE}\x1b[{rows};1H\x1b[2K{text}{_RESTORE}")

    def stop(self) -> None:
        """Give the whole screen back and clear the status row."""
        if not self._rows:
            return
        rows, _ = self._size()
        self._write(f"{_SAVE}\x1b[r\x1b[{rows};1H\x1b[2K{_RESTORE}")
        self._rows = 0

    async def run(self) -> None:
        """Draw every ``period_s`` until cancelled; the screen is restored on the way out."""
        self.start()
        try:
            while True:
                await asyncio.sleep(self.period_s)
                self.draw()
        finally:
            self.stop()


def _render(text: str, width: int) -> str:
    """``text`` styled by rich and cut to ``width`` columns, as terminal escape codes."""
    from rich.console import Console
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=True, color_system="standard")
    line = Text(text, no_wrap=True, overflow="ellipsis")
    line.highlight_regex(r"\d[\d.,]* (W|kW)\b", "bold")
    line.highlight_regex(r"\d[\d.,]* (J|kJ|MJ)\b", "cyan")
    line.truncate(max(width - 1, 1), overflow="ellipsis")
    console.print(line, end="", soft_wrap=True)
    return buffer.getvalue()
