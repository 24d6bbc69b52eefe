"""emonPi collector: wall power from the emonPi / emonTx serial stream.

Source: the ATmega (emonPi v1) or AVR-DB (emonPi2, emonTx4) prints one text line per reading on its
UART — ``/dev/ttyAMA0`` (``/dev/serial0``) on the Pi, ``/dev/ttyUSB0`` for a USB emonTx4 — 8N1 at
38400 baud (classic discrete-sampling firmware) or 115200 (emonPi_CM, emonPi2, emonTx4). A line is
either a JeeLib frame ``OK <node> <b0> … <bn> [(<rssi>)]`` whose bytes, in decimal, are the raw image
of a packed little-endian C struct (AVR ``int`` = int16, ``long`` = int32), or an already-scaled
``key:value,...`` / JSON line. There is no checksum on the serial line.

Frames are decoded by a layout chosen by *(node, payload length)*; both must match, and a frame that
matches no layout is counted, never decoded by guess. Every other line is classified (banner,
settings echo, calibration output, bad-CRC ``?`` frame, non-UTF-8 garbage...) and counted per
reason in :meth:`EmonPiCollector.stats`.

Read with ``pyserial_asyncio.open_serial_connection``; the collector owns reconnects (backoff from
``reconnect_min`` doubling to ``reconnect_max``; one log line per outage).

Emits ``emonpi`` points tagged ``node`` and ``layout``. Units: power W (``power1_watts``), voltage
V (``vrms_volts``), temperature °C (``temp1_celsius``), firmware energy counters Wh
(``energy1_wh``), cumulative energy since the collector opened J (``energy1_joules``, from the Wh
counters where the layout has them, else integrated from power between frames), RSSI dBm
(``rssi_dbm``), counts (``msg_count``, ``pulse_count``). The timestamp is the *receive* time of the
line (when its newline arrived), not the firmware's sampling time: classic firmware takes a
~200 ms snapshot every 5 s, CM firmware averages over ~9.8 s ending just before the line is sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import ClassVar

from acquisition.advancing import Advance, not_advancing
from acquisition.api import Emit, PluginContext
from acquisition.errors import ConfigError, NoData, install_hint
from acquisition.point import FieldValue, Point

from .config import EmonPiConfig
from .energy import EnergyCounter
from .fields import KEY_NAMES, NO_SENSOR_CELSIUS, implausible_field, key_field
from .layouts import (
    BUILTIN_LAYOUTS,
    FieldSpec,
    Layout,
    LayoutTable,
    make_layout,
    parse_layouts,
)
from .parse import (
    MAX_PAYLOAD,
    REASONS,
    JeeFrame,
    LineBuffer,
    LineError,
    ValueLine,
    encode_frame,
    parse_jeelib,
    parse_json_values,
    parse_key_values,
    parse_line,
)

__all__ = [
    "BUILTIN_LAYOUTS",
    "DEFAULT_PORTS",
    "KEY_NAMES",
    "MAX_PAYLOAD",
    "REASONS",
    "WHY_ZEROS",
    "EmonPiCollector",
    "EmonPiConfig",
    "EnergyCounter",
    "FieldSpec",
    "JeeFrame",
    "Layout",
    "LayoutTable",
    "LineBuffer",
    "LineError",
    "ValueLine",
    "encode_frame",
    "make_layout",
    "parse_jeelib",
    "parse_json_values",
    "parse_key_values",
    "parse_layouts",
    "parse_line",
]

log = logging.getLogger(__name__)

MEASUREMENT = "emonpi"
MSG_PROBE_FAILED = "cannot open {port}: {reason}"
MSG_PROBE_OPENED = "{port} opened at {baud} baud"
MSG_IMPLAUSIBLE = (
    "emonpi %s: %s decoded to an impossible %s; readings like it are dropped and counted "
    "(implausible_frames). If this node uses another layout, configure it under layouts "
    "(node, struct, names, units, scales)"
)
DEFAULT_PORTS = ("/dev/ttyAMA0", "/dev/serial0", "/dev/ttyUSB0")


_HINTS = (
    ("multiple access", "another process (emonhub?) may be reading the port; only one may own it"),
    ("exclusively lock", "another nrg-collect holds the port"),
    ("Permission denied", "add the user to the dialout group or fix the device's udev rule"),
    ("No such file", "no such device (USB unplugged? UART disabled in config.txt?)"),
)

_STAT_KEYS = (
    "lines",
    "frames",
    "value_lines",
    "points",
    *REASONS,
    "partial",
    "overlong",
    "unknown_layout",
    "unknown_keys",
    "implausible_frames",
    "msg_missed",
    "device_resets",
    "counter_resets",
    "energy_gaps",
    "connects",
    "disconnects",
    "open_errors",
)

WHY_ZEROS = "the meter sends only zeros: is its CT clamp on the machine's supply cable?"
_POWER_FIELD = re.compile(r"power\w*_watts")
_ENERGY_FIELD = re.compile(r"(power\w*_watts|energy\w*_(joules|wh))")

_BAUD_WINDOW = 512
"""Bytes after a connect before the wrong-baud-rate hint is judged (then on every read, until it
has been given once for that connect)."""


class EmonPiCollector:
    """Stream collector for the emonPi / emonTx serial port (see the module docstring)."""

    name: ClassVar[str] = "emonpi"
    config_class: ClassVar[type] = EmonPiConfig

    def __init__(
        self,
        config: EmonPiConfig,
        context: PluginContext | None = None,
        *,
        wall_clock: Callable[[], int] = time.time_ns,
        mono_clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        try:
            config.validate()
            user = parse_layouts(config.layouts)
        except ValueError as exc:
            raise ConfigError(f"[collectors.emonpi] {exc}") from exc
        self.config = config
        self.context = context
        self._wall = wall_clock
        self._mono = mono_clock
        layouts = [*(BUILTIN_LAYOUTS if config.builtin_layouts else ()), *user]
        if config.temp_sensors >= 0:
            layouts = [layout.with_temp_sensors(config.temp_sensors) for layout in layouts]
        self.table = LayoutTable(layouts)
        self._keys = dict(config.keys)
        self._ranges: dict[str, tuple[float, float] | None] = {}
        self.port = config.port
        self._counts: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self._energy: dict[tuple[str, str], EnergyCounter] = {}
        self._msg: dict[tuple[str, str], int] = {}
        self._advance: dict[tuple[str, str], Advance] = {}
        self._logged: set[object] = set()
        self._writer: asyncio.StreamWriter | None = None
        self._outage: str | None = None
        self._outage_since = 0.0
        self._first_line = True
        self._window = [0, 0, 0]  # bytes read, decoded, noise since connect (baud-rate hint)
        self._baud_warned = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Pick the port; NoData when none is configured and none of the usual ones exists."""
        try:
            import serial_asyncio  # noqa: F401
        except ImportError as exc:
            raise NoData(
                f"pyserial-asyncio is not installed ({exc}): {install_hint('serial')}"
            ) from None
        if not self.port:
            tried = []
            for candidate in DEFAULT_PORTS:
                path = os.path.join(self.config.root, candidate.lstrip("/"))
                tried.append(path)
                if os.path.exists(path):
                    self.port = path
                    break
            else:
                raise NoData(f"no serial port configured and none of {', '.join(tried)} exists")

    async def probe(self, wait_s: float = 0.0) -> str:
        """Open the port once, as :meth:`run` would, and close it: what ``nrg-collect list``
        reports. With ``wait_s`` > 0, also read up to one line for that long and say what it was.

        Raises :class:`NoData` with the reason (and the fix where one is known) when the port
        cannot be opened; call :meth:`open` first.
        """
        if not self.port:
            raise NoData("no serial port")
        try:
            first = await asyncio.to_thread(self._probe_sync, wait_s)
        except (OSError, ValueError) as exc:  # SerialException is an OSError
            reason = str(exc) or type(exc).__name__
            hint = next((h for needle, h in _HINTS if needle in reason), "")
            raise NoData(
                MSG_PROBE_FAILED.format(port=self.port, reason=reason)
                + (f" ({hint})" if hint else "")
            ) from None
        opened = MSG_PROBE_OPENED.format(port=self.port, baud=self.config.baudrate)
        if wait_s <= 0:
            return opened
        if first is None:
            return opened + f"; no line within {wait_s:g} s"
        try:
            parsed = parse_line(first)
        except LineError as exc:
            return opened + f"; first line: {exc.reason}"
        if isinstance(parsed, JeeFrame):
            layout = self.table.find(parsed.node, len(parsed.payload))
            known = f"layout {layout.name}" if layout else "no matching layout"
            return opened + f"; first line: a frame from node {parsed.node} ({known})"
        return opened + f"; first line: a {parsed.format} reading"

    def _probe_sync(self, wait_s: float) -> bytes | None:
        import serial

        port = serial.serial_for_url(
            self.port, baudrate=self.config.baudrate, exclusive=True, do_not_open=True
        )
        port.timeout = wait_s if wait_s > 0 else 0
        port.open()
        try:
            if wait_s <= 0:
                return None
            # The line in progress when the port opened is cut: take the next whole one.
            deadline = time.monotonic() + wait_s
            port.readline()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            port.timeout = left
            line: bytes = port.readline()
            return line if line.endswith(b"\n") else None
        finally:
            port.close()

    async def aclose(self) -> None:
        """Close the port if a run left it open."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def describe(self) -> str:
        """One line for ``nrg-collect list``."""
        names = ", ".join(layout.name for layout in self.table.layouts())
        return f"{self.port or 'no port'} at {self.config.baudrate} baud; layouts: {names}"

    def stats(self) -> dict[str, int | float]:
        """Counters since start: lines and frames read, points emitted, lines dropped per reason,
        connects and port errors."""
        out: dict[str, int | float] = dict(self._counts)
        for counter in self._energy.values():
            out["energy_gaps"] += counter.gaps
            out["counter_resets"] += counter.counter_resets
        return out

    def status(self) -> str:
        """Short state for the live terminal line."""
        c = self._counts
        state = f"down ({self._outage})" if self._outage else "ok"
        return f"{state}, {c['frames'] + c['value_lines']} readings"

    # -- serial loop -------------------------------------------------------------------------

    async def run(self, emit: Emit) -> None:
        """Read the port until cancelled, reopening it with backoff when it fails."""
        import serial_asyncio

        cfg = self.config
        delay = cfg.reconnect_min
        while True:
            try:
                reader, writer = await serial_asyncio.open_serial_connection(
                    url=self.port, baudrate=cfg.baudrate, exclusive=True
                )
            except (OSError, ValueError) as exc:  # SerialException is an OSError
                self._counts["open_errors"] += 1
                self._port_failed(f"cannot open: {exc}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, cfg.reconnect_max)
                continue
            self._writer = writer
            self._connected()
            delay = cfg.reconnect_min
            reason = "end of file"
            try:
                await self._send_commands(writer)
                await self._read(reader, emit)
            except (OSError, ValueError) as exc:
                reason = str(exc) or type(exc).__name__
            finally:
                self._writer = None
                writer.close()
            self._counts["disconnects"] += 1
            self._port_failed(f"lost: {reason}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.reconnect_max)

    def _connected(self) -> None:
        self._counts["connects"] += 1
        self._first_line = True
        self._window = [0, 0, 0]
        self._baud_warned = False
        if self._outage is not None:
            log.info(
                "emonpi %s: port is back after %.1f s",
                self.port,
                time.monotonic() - self._outage_since,
            )
            self._outage = None

    def _port_failed(self, reason: str) -> None:
        if self._outage is None:
            hint = next((h for needle, h in _HINTS if needle in reason), "")
            log.warning(
                "emonpi %s: port %s%s; retrying with backoff up to %g s",
                self.port,
                reason,
                f" ({hint})" if hint else "",
                self.config.reconnect_max,
            )
            self._outage = reason
            self._outage_since = time.monotonic()

    async def _send_commands(self, writer: asyncio.StreamWriter) -> None:
        for cmd in self.config.commands:
            writer.write(cmd.encode("ascii") + b"\r\n")
            await writer.drain()
            # The ATmega's serial buffer is small and it answers each command before the next.
            await asyncio.sleep(0.1)

    async def _read(self, reader: asyncio.StreamReader, emit: Emit) -> None:
        buffer = LineBuffer(self.config.max_line)
        handle = self.handle_line
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                overlong, dropped = buffer.overlong, buffer.dropped_bytes
                for line in buffer.feed(data):
                    handle(line, emit)
                self._counts["overlong"] += buffer.overlong - overlong
                window = self._window
                window[0] += len(data)
                window[2] += buffer.dropped_bytes - dropped
                if not self._baud_warned and window[0] >= _BAUD_WINDOW:
                    self._check_baud()
        finally:
            if buffer.pending:
                self._counts["partial"] += 1

    # -- per line ----------------------------------------------------------------------------

    def handle_line(self, raw: bytes, emit: Emit) -> None:
        """Parse one line (without ``\\n``) received now and emit its point, or count why not."""
        counts = self._counts
        counts["lines"] += 1
        try:
            parsed = parse_line(raw)
        except LineError as exc:
            reason = exc.reason
            if self._first_line and reason != "empty":
                reason = "partial"  # a line cut at connect time, not a property of the device
            counts[reason] += 1
            if reason in ("not_utf8", "garbage"):
                self._window[2] += len(raw) + 1
            self._first_line = False
            return
        self._first_line = False
        self._window[1] += len(raw) + 1
        wall_ns = self._wall()
        mono_ns = self._mono()
        if isinstance(parsed, JeeFrame):
            layout = self.table.find(parsed.node, len(parsed.payload))
            if layout is None:
                counts["unknown_layout"] += 1
                self._log_once(
                    ("layout", parsed.node, len(parsed.payload)),
                    "emonpi %s: node %d sent %d-byte frames that match no layout (add one under "
                    "layouts)",
                    self.port,
                    parsed.node,
                    len(parsed.payload),
                )
                return
            counts["frames"] += 1
            fields = layout.decode(parsed.payload)
            if not fields:  # every member held its "no reading" sentinel
                return
            if parsed.rssi:  # "(-0)" marks the emonPi's own readings: no radio, no RSSI
                fields["rssi_dbm"] = parsed.rssi
            if self._implausible(fields, f"node {parsed.node} (layout {layout.name})"):
                return
            node, layout_name, averaged = str(parsed.node), layout.name, layout.averaged
        else:
            counts["value_lines"] += 1
            mapped = self._map_keys(parsed.values)
            if mapped is None:
                counts["malformed"] += 1
                return
            fields = mapped
            if self._implausible(fields, f"{parsed.format} lines"):
                return
            # key:value and JSON lines come from emonLibCM/DB firmware, which averages
            node, layout_name, averaged = self.config.text_node, parsed.format, True
        self._emit_reading(node, layout_name, averaged, fields, wall_ns, mono_ns, emit)

    def _map_keys(self, values: Mapping[str, float]) -> dict[str, FieldValue] | None:
        """Field names for printed keys; None when a count is not an integer (a damaged line)."""
        fields: dict[str, FieldValue] = {}
        for key, value in values.items():
            name = self._keys.get(key)
            if name is None:
                name = key_field(key)
                if name is not None and len(self._keys) < 1024:
                    self._keys[key] = name
            if name is None:
                self._counts["unknown_keys"] += 1
                self._log_once(
                    ("key", key),
                    "emonpi %s: key %r has no field name; map it under keys (e.g. keys = "
                    '{ %s = "name_unit" })',
                    self.port,
                    key,
                    key,
                )
                continue
            if name.endswith("_count"):
                if not value.is_integer() or abs(value) >= 2**63:
                    return None
                fields[name] = int(value)
            elif name.endswith("_celsius") and value in NO_SENSOR_CELSIUS:
                continue  # an empty sensor slot, printed as 300.00
            else:
                fields[name] = value
        return fields

    def _implausible(self, fields: Mapping[str, FieldValue], source: str) -> bool:
        """Count, and log once per source, a reading with a field outside its plausible range."""
        bad = implausible_field(fields, self._ranges)
        if bad is None:
            return False
        self._counts["implausible_frames"] += 1
        self._log_once(
            ("implausible", source),
            MSG_IMPLAUSIBLE,
            self.port,
            source,
            bad,
        )
        return True

    def _emit_reading(
        self,
        node: str,
        layout_name: str,
        averaged: bool,
        fields: dict[str, FieldValue],
        wall_ns: int,
        mono_ns: int,
        emit: Emit,
    ) -> None:
        stream = (node, layout_name)
        msg = fields.get("msg_count")
        reset = False
        if isinstance(msg, int):
            last = self._msg.get(stream)
            if last is not None:
                if msg > last + 1:
                    self._counts["msg_missed"] += msg - last - 1
                elif msg <= last:
                    self._counts["device_resets"] += 1
                    reset = True
            self._msg[stream] = msg
        counter = self._energy.get(stream)
        if counter is None:
            counter = self._energy[stream] = EnergyCounter(
                self.config.energy, self.config.max_gap, averaged
            )
        if not fields:
            return
        fields.update(counter.update(fields, mono_ns, reset))
        if not self._measures(stream, fields, mono_ns):
            fields = {k: v for k, v in fields.items() if not _ENERGY_FIELD.fullmatch(k)}
            if not fields:
                return
        self._counts["points"] += 1
        emit(Point(MEASUREMENT, {"node": node, "layout": layout_name}, fields, wall_ns))

    def _measures(self, stream: tuple[str, str], fields: dict[str, FieldValue], mono: int) -> bool:
        """Whether this stream's power and energy are to be written: not until a power reading
        is not zero (see :mod:`acquisition.advancing`)."""
        watch = self._advance.get(stream)
        if watch is None:
            watch = self._advance[stream] = Advance("emonpi", f"node {stream[0]} power", WHY_ZEROS)
        moved = any(v != 0 for k, v in fields.items() if _POWER_FIELD.fullmatch(k))
        return watch.observe(moved, mono)

    def not_advancing(self) -> str | None:
        """``not advancing: …`` when every stream so far has sent only zero power; else None."""
        return not_advancing(list(self._advance.values()))

    def _check_baud(self) -> None:
        # Judged on bytes, not lines: at the wrong rate a newline is rarely read as one.
        total, decoded, noise = self._window
        if decoded * 4 < total and noise * 2 >= total:
            self._baud_warned = True
            other = 115200 if self.config.baudrate != 115200 else 38400
            log.warning(
                "emonpi %s: %d of the first %d bytes are noise (not UTF-8, control characters, "
                "no line ends) and few decoded: the baud rate %d is probably wrong (try %d; "
                "classic emonPi firmware uses 38400, emonPi_CM, emonPi2 and emonTx4 115200)",
                self.port,
                noise,
                total,
                self.config.baudrate,
                other,
            )

    def _log_once(self, key: object, msg: str, *args: object) -> None:
        if key in self._logged or len(self._logged) >= 256:
            return
        self._logged.add(key)
        log.warning(msg, *args)
