"""emonPi simulator: realistic emonPi / emonTx serial output on a pseudo-terminal or a port.

``nrg-collect emonpi-sim`` opens a pty pair (``os.openpty``), prints the slave's path (and links
``--link PATH`` to it, the way udev's ``/dev/serial/by-id/`` names work) and writes one reading per
``--interval`` seconds in the chosen layout: JeeLib ``OK`` frames built with the collector's own
layout table (``--format ok``), or emonLibCM-style ``key:value`` / JSON lines. ``--port DEV``
writes to an existing serial device instead (pyserial, at ``--baudrate``). Values follow a slow
daily-looking wave plus noise: power in W, Vrms around 240 V, temperatures in °C, Wh counters
integrated from the simulated power, MSG and pulse counters increasing.

:func:`uart_misread` models what a UART receiver set to the wrong baud rate makes of a byte stream
(start bit, 8 data bits LSB first, stop bit; framing errors read as NUL, as Linux delivers them
with ``IGNPAR`` and ``PARMRK`` off), for showing and testing the collector's wrong-baud handling.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import random
import signal
import sys
import threading
import time
import tty
from collections.abc import Callable, Iterator

from collectors.emonpi import BUILTIN_LAYOUTS, Layout, encode_frame

__all__ = [
    "BANNERS",
    "Simulator",
    "banner_lines",
    "key_value_line",
    "main",
    "uart_misread",
]

BANNERS: dict[str, list[str]] = {
    "classic": [
        "",
        "emonPi V2.93",
        "OpenEnergyMonitor.org",
        "startup...",
        "LCD found i2c 0x27",
        "CT 1 Cal: 90.90",
        "VRMS AC ~239.07V",
        "AC Wave Detected - Real Power calc enabled",
        "Vcal: 256.80",
        "Detected 2 CT'sDetect 1 DS18B20",
        "Node 5 Freq 433Mhz Network 210",
        "[emonPi.29.30] E i5 g210 @ 433 MHz q1 USA 0 ",
    ],
    "cm": [
        "|emonPiCM V1.1.4",
        "|Radio format: LowPowerLabs",
        "Settings: r3 b4 p25 g210 i5",
        "|Vrms:240.1, I1:0.45, pf1:0.9812",
    ],
    "avrdb": [
        "describe:EmonTX4CM",
        "RFM69CW  Freq: 433MHz Group: 210 Node: 17 ",
        "Reference voltage calibration: 1.0243",
        "No temperature sensors detected, disabling temperature",
        "AC present - Real Power calc enabled",
    ],
}
"""Boot output of each firmware family (reconstructed from firmware source; see interfaces.md)."""

_LAYOUTS = {layout.name: layout for layout in BUILTIN_LAYOUTS}
_BASE_WATTS = (350.0, 120.0, 60.0, 900.0, 25.0, 5.0)


def banner_lines(layout: Layout, fmt: str = "ok") -> list[str]:
    """The boot banner a unit sending ``layout`` would print first."""
    if fmt != "ok" or layout.name in ("emontx4", "emonpi2", "emon_db_3phase"):
        return BANNERS["avrdb"]
    if "msg_count" in {f.key for f in layout.fields}:
        return BANNERS["cm"]
    return BANNERS["classic"]


class Simulator:
    """Successive readings of one unit: physical values keyed by the layout's field names.

    ``None`` marks an absent sensor (the layout's sentinel is sent). Deterministic for a seed.
    """

    def __init__(self, layout: Layout, interval_s: float = 5.0, seed: int = 0) -> None:
        self.layout = layout
        self.interval_s = interval_s
        self.rng = random.Random(seed)
        self.t = 0.0
        self.msg = 0
        self.pulses: dict[str, int] = {}
        self.wh: dict[str, float] = {}

    def readings(self) -> Iterator[dict[str, float | None]]:
        """An endless iterator of readings, one per interval."""
        while True:
            yield self.step()

    def step(self) -> dict[str, float | None]:
        """The next reading."""
        rng = self.rng
        self.t += self.interval_s or 5.0
        self.msg += 1
        wave = math.sin(self.t / 600.0)
        values: dict[str, float | None] = {}
        powers: dict[str, float] = {}
        for spec in self.layout.fields:
            key, name, unit = spec.key, spec.name, spec.unit
            value: float | None
            if unit == "watts":
                if name == "power1_plus_2":
                    value = powers.get("1", 0.0) + powers.get("2", 0.0)
                else:
                    ch = name.removeprefix("power")
                    index = (int(ch) - 1) % len(_BASE_WATTS) if ch.isdigit() else 0
                    base = _BASE_WATTS[index]
                    value = round(base * (1 + 0.3 * wave) + rng.gauss(0, base * 0.05))
                    powers[ch] = value
            elif unit == "volts":
                if name == "battery":
                    value = 3.0
                else:
                    value = round(240.0 + 2.0 * wave + rng.gauss(0, 0.3), 2)
            elif unit == "celsius":
                if name in ("temp1", "temp"):
                    value = round(21.5 + wave, 1)
                elif spec.missing:
                    value = None
                else:
                    value = 18.0
            elif unit == "percent":
                value = 55.0
            elif unit == "wh":
                ch = name.removeprefix("energy")
                total = self.wh.get(ch, 0.0) + powers.get(ch, 0.0) * self.interval_s / 3600.0
                self.wh[ch] = total
                value = float(math.floor(total))
            elif name == "msg":
                value = self.msg
            elif name.startswith("pulse"):
                self.pulses[name] = self.pulses.get(name, 0) + rng.randint(0, 3)
                value = self.pulses[name]
            else:
                value = 0.0
            values[key] = value
        return values

    def frame(self, values: dict[str, float | None], node: int, rssi: int | None) -> str:
        """The JeeLib line for ``values``."""
        return encode_frame(node, self.layout.encode(values), rssi)


_TEXT_KEYS = {"msg_count": "MSG", "vrms_volts": "Vrms", "pulse_count": "pulse"}
_TEXT_PREFIXES = (("power", "_watts", "P"), ("energy", "_wh", "E"), ("temp", "_celsius", "T"))


def _text_key(field_key: str) -> str | None:
    key = _TEXT_KEYS.get(field_key)
    if key is not None:
        return key
    if field_key.startswith("v") and field_key.endswith("_volts") and field_key[1:-6].isdigit():
        return "V" + field_key[1:-6]
    for prefix, suffix, letter in _TEXT_PREFIXES:
        middle = field_key.removeprefix(prefix).removesuffix(suffix)
        if field_key.startswith(prefix) and field_key.endswith(suffix) and middle.isdigit():
            return letter + middle
    return None


def _text_value(key: str, value: float) -> str:
    if key in ("MSG", "pulse") or key[0] in "PE":
        return str(round(value))
    return f"{value:.2f}"


def key_value_line(values: dict[str, float | None], fmt: str = "kv") -> str:
    """An emonLibCM/DB text line (``kv``: ``MSG:1,Vrms:240.12,P1:79,...``; ``json``) for the
    values that have a printed key; absent sensors are left out, as the firmware does."""
    pairs = [
        (key, value)
        for key, value in ((_text_key(k), v) for k, v in values.items())
        if key is not None and value is not None
    ]
    if fmt == "json":
        body = ",".join(f'"{k}":{_text_value(k, v)}' for k, v in pairs)
        json.loads("{" + body + "}")  # the line must be valid JSON
        return "{" + body + "}"
    return ",".join(f"{k}:{_text_value(k, v)}" for k, v in pairs)


def uart_misread(data: bytes, tx_baud: int, rx_baud: int) -> bytes:
    """What a UART at ``rx_baud`` reads from ``data`` sent back to back at ``tx_baud`` (8N1).

    The receiver waits for a falling edge, samples the start bit's middle and then 8 data bits
    and the stop bit one of *its* bit times apart; a low stop bit is a framing error, read as NUL.
    """
    bits: list[int] = []
    for byte in data:
        bits.append(0)
        bits.extend((byte >> i) & 1 for i in range(8))
        bits.append(1)
    n = len(bits)

    def level(t: float) -> int:
        i = int(t * tx_baud)
        return bits[i] if 0 <= i < n else 1

    out = bytearray()
    i = 0  # tx bit index where the search for the next falling edge starts
    while i < n:
        if bits[i] != 0 or (i > 0 and bits[i - 1] != 1):
            i += 1
            continue
        start = i / tx_baud
        if level(start + 0.5 / rx_baud) != 0:  # glitch shorter than half a receiver bit
            i += 1
            continue
        byte = 0
        for k in range(8):
            byte |= level(start + (k + 1.5) / rx_baud) << k
        stop_t = start + 9.5 / rx_baud
        out.append(byte if level(stop_t) == 1 else 0)
        i = max(i + 1, math.ceil(stop_t * tx_baud))
    return bytes(out)


def _lines(args: argparse.Namespace, layout: Layout) -> Iterator[tuple[str, bool]]:
    """(line, is_reading) pairs: the banner if asked for, then readings."""
    sim = Simulator(layout, args.interval, args.seed)
    if args.banner:
        for line in banner_lines(layout, args.format):
            yield line, False
    for values in sim.readings():
        if args.format == "ok":
            yield sim.frame(values, args.node, args.rssi), True
        else:
            yield key_value_line(values, args.format), True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nrg-collect emonpi-sim",
        description="Write simulated emonPi/emonTx serial output to a pseudo-terminal or a port.",
    )
    p.add_argument("--layout", default="emonpi_classic", choices=sorted(_LAYOUTS))
    p.add_argument("--node", type=int, help="node id (default: the layout's first node)")
    p.add_argument("--format", choices=("ok", "kv", "json"), default="ok")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between readings")
    p.add_argument("--count", type=int, default=0, help="readings to send (0: until Ctrl-C)")
    p.add_argument("--rssi", type=int, default=None, help="RSSI to print, e.g. 0 for (-0)")
    p.add_argument("--banner", action="store_true", help="print the firmware's boot banner first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", help="write to this serial device instead of a new pty")
    p.add_argument("--baudrate", type=int, default=38400, help="baud rate for --port")
    p.add_argument("--link", help="symlink to create to the pty's path (like /dev/serial/by-id)")
    p.add_argument(
        "--misread-at",
        type=int,
        metavar="BAUD",
        help="send what a reader at BAUD would see of frames sent at --baudrate (wrong-baud demo)",
    )
    p.add_argument("--list", action="store_true", help="list the layouts and exit")
    return p


def _pty_writer(link: str | None) -> tuple[str, Callable[[bytes], bool], Callable[[], None]]:
    master, slave = os.openpty()
    tty.setraw(master)
    os.set_blocking(master, False)
    path = os.ttyname(slave)
    if link:
        tmp = f"{link}.tmp{os.getpid()}"
        os.symlink(path, tmp)
        os.replace(tmp, link)

    def write(data: bytes) -> bool:
        # Like a UART nobody listens to: what does not fit in the pty buffer is lost.
        try:
            os.write(master, data)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            return False
        return True

    def close() -> None:
        if link:
            with contextlib.suppress(OSError):
                os.unlink(link)
        os.close(master)
        os.close(slave)

    return path, write, close


def _port_writer(
    device: str, baudrate: int
) -> tuple[str, Callable[[bytes], bool], Callable[[], None]]:
    import serial

    port = serial.Serial(device, baudrate)

    def write(data: bytes) -> bool:
        port.write(data)
        return True

    return device, write, port.close


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    """Entry point of ``nrg-collect emonpi-sim``; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.list:
        for layout in BUILTIN_LAYOUTS:
            nodes = ",".join(map(str, sorted(layout.nodes)))
            print(f"{layout.name:16} nodes {nodes:24} {layout.size:3} bytes  {layout.struct}")
        return 0
    layout = _LAYOUTS[args.layout]
    if args.node is None:
        args.node = min(layout.nodes)
    elif args.format == "ok" and args.node not in layout.nodes:
        print(f"warning: node {args.node} is not one of {args.layout}'s nodes", file=sys.stderr)

    if args.format != "ok" and not key_value_line(Simulator(layout).step(), "kv"):
        print(f"error: {args.layout} has no fields with key:value names", file=sys.stderr)
        return 2
    if args.port:
        path, write, close = _port_writer(args.port, args.baudrate)
    else:
        path, write, close = _pty_writer(args.link)
    where = args.link or path
    what = f"{args.layout} ({args.format})" if args.format != "ok" else args.layout
    print(
        f"emonpi-sim: {what} from node {args.node} every {args.interval:g} s on {path}"
        + (f" (linked as {args.link})" if args.link else ""),
        flush=True,
    )
    baud = 115200 if args.format != "ok" or "msg_count" in {f.key for f in layout.fields} else 38400
    print(
        f'point the collector at it:  [[collectors.emonpi]]  port = "{where}"  baudrate = {baud}',
        flush=True,
    )
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM ends the run like Ctrl-C, so the pty closes and the link goes away.
        previous = signal.signal(signal.SIGTERM, _interrupt)
    sent = dropped = 0
    try:
        sent, dropped = _send(args, layout, write)
    except KeyboardInterrupt:
        pass
    finally:
        close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(f"emonpi-sim: {sent} lines written, {dropped} dropped (nobody reading)", flush=True)
    return 0


def _send(
    args: argparse.Namespace, layout: Layout, write: Callable[[bytes], bool]
) -> tuple[int, int]:
    """Write the lines at the configured pace; (lines written, lines dropped)."""
    sent = dropped = readings = 0
    deadline = time.monotonic()
    for line, is_reading in _lines(args, layout):
        data = (line + "\r\n").encode()
        if args.misread_at:
            data = uart_misread(data, args.baudrate, args.misread_at)
        if write(data):
            sent += 1
        else:
            dropped += 1
        if is_reading:
            readings += 1
            if args.count and readings >= args.count:
                break
            deadline += args.interval
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return sent, dropped


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
