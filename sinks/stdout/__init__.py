"""Stdout sink: line protocol on standard output, for piping (``nrg-collect | influx write``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TextIO

from acquisition.api import PluginContext
from acquisition.errors import WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point

__all__ = ["StdoutConfig", "StdoutSink"]


@dataclass
class StdoutConfig:
    measurements: list[str] | None = None
    """Only these measurements (default: all)."""


class StdoutSink:
    name: ClassVar[str] = "stdout"
    config_class: ClassVar[type] = StdoutConfig

    def __init__(
        self, config: StdoutConfig, context: PluginContext, stream: TextIO | None = None
    ) -> None:
        self.encoder = LineEncoder(context.tags)
        self.only = set(config.measurements) if config.measurements else None
        self.stream = stream

    def where(self) -> str:
        return "stdout"

    async def open(self) -> None:
        return None

    async def write(self, batch: Sequence[Point]) -> None:
        points = batch if self.only is None else [p for p in batch if p.measurement in self.only]
        stream = self.stream or sys.stdout
        try:
            stream.write(self.encoder.encode_many(points))
            stream.flush()
        except BrokenPipeError as exc:
            raise WriteError("stdout closed (broken pipe)", retryable=False) from exc
        except OSError as exc:
            raise WriteError(f"cannot write to stdout: {exc.strerror}", retryable=True) from exc

    async def aclose(self) -> None:
        return None
