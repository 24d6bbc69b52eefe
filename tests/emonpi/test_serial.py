"""The emonPi collector on real pseudo-terminals with real pyserial-asyncio.

The test writes what the emonPi's UART would send to the pty master; the collector opens the
slave's path (or a symlink to it, as udev's /dev/serial/by-id names are) and decodes it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import pytest

from acquisition.errors import NoData
from acquisition.lineproto import LineEncoder
from collectors.emonpi import BUILTIN_LAYOUTS, EmonPiCollector, EmonPiConfig, parse_line
from collectors.emonpi.sim import Simulator, main, uart_misread

from .conftest import FIXTURES, Pty, fast_config, running, wait_until

LAYOUTS = {layout.name: layout for layout in BUILTIN_LAYOUTS}
CLASSIC = b"OK 5 96 1 211 255 51 1 73 94 215 0 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)\r\n"

TRANSCRIPTS = {
    "classic_38400.txt": {
        "lines": 22,
        "frames": 6,
        "points": 6,
        "empty": 1,
        "bad_crc": 1,
        "settings": 2,
        "ack": 1,
        "calibration": 2,
        "text": 7,
        "unknown_layout": 2,
        "connects": 1,
    },
    "cm_115200.txt": {
        "lines": 13,
        "frames": 6,
        "points": 6,
        "settings": 1,
        "calibration": 1,
        "text": 2,
        "partial": 1,
        "unknown_layout": 2,
        "msg_missed": 1,
        "device_resets": 1,
        "connects": 1,
    },
    "emontx4_kv_115200.txt": {
        "lines": 12,
        "value_lines": 6,
        "points": 6,
        "malformed": 1,
        "settings": 1,
        "calibration": 1,
        "text": 2,
        "partial": 1,
        "unknown_keys": 5,
        "device_resets": 1,
        "connects": 1,
    },
    "payloadtx_38400.txt": {
        "lines": 7,
        "frames": 6,
        "points": 6,
        "empty": 1,
        "connects": 1,
    },
}


@pytest.mark.parametrize("chunk", [4096, 7])
@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
async def test_transcript_to_line_protocol(pty_pair: Pty, name: str, chunk: int) -> None:
    data = (FIXTURES / name).read_bytes()
    baudrate = 115200 if "115200" in name else 38400
    async with running(fast_config(pty_pair.path, baudrate=baudrate)) as r:
        await wait_until(lambda: r.stat("connects") == 1)
        await pty_pair.write(data, chunk=chunk)
        await wait_until(lambda: r.lines_seen() >= data.count(b"\n"))
        got = LineEncoder().encode_many(r.points)
        stats = {k: v for k, v in r.collector.stats().items() if v}
    expected = (FIXTURES / name.replace(".txt", ".lp")).read_text()
    assert got == expected
    assert stats == TRANSCRIPTS[name]


async def test_noise_is_counted_and_data_still_decodes(pty_pair: Pty) -> None:
    noise = (
        b"7 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)\r\n"  # the tail of a frame cut at connect
        b"emonPi V2.93\r\n"
        b"\xfe\xff\xfa garbage \x93\r\n"
        b"OK 5 1 2\x00 3\r\n"
        + b"A" * 3000
        + b"\r\n"  # overlong: dropped whole
        + b"OK 5 96 1 211 255 51 1 73 94 215 0\r\n"  # 10 bytes: wrong length for node 5
        b"OK 5 96 1 999\r\n"
        b" ? 5 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 (-80)\r\n"
        b"\x01\x02\r\n"
        b"\r\n"
    )
    config = fast_config(pty_pair.path, max_line=512)
    async with running(config) as r:
        await wait_until(lambda: r.stat("connects") == 1)
        await pty_pair.write(noise, chunk=5)
        await pty_pair.write(b"OK 5 96 1 211 255 51 1 73 9")  # half a frame...
        await wait_until(lambda: r.lines_seen() == 10)
        assert r.points == []
        await pty_pair.write(b"4 215 0 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)\r\n")  # ...completed
        await wait_until(lambda: len(r.points) == 1)
        stats = {k: v for k, v in r.collector.stats().items() if v}
    assert r.points[0].fields["vrms_volts"] == 241.37
    assert stats == {
        "lines": 10,
        "partial": 1,
        "text": 1,
        "not_utf8": 1,
        "garbage": 1,
        "overlong": 1,
        "unknown_layout": 1,
        "malformed": 1,
        "bad_crc": 1,
        "control": 1,
        "empty": 1,
        "frames": 1,
        "points": 1,
        "connects": 1,
    }


@pytest.mark.parametrize(
    ("layout", "sent_at", "read_at"),
    [("emonpi_cm", 115200, 38400), ("emonpi_classic", 38400, 115200)],
)
async def test_wrong_baud_rate_is_named_in_the_log(
    pty_pair: Pty, caplog: pytest.LogCaptureFixture, layout: str, sent_at: int, read_at: int
) -> None:
    sim = Simulator(LAYOUTS[layout], 5.0, seed=7)
    sent = b"".join((sim.frame(sim.step(), 5, 0) + "\r\n").encode() for _ in range(100))
    garbled = uart_misread(sent, sent_at, read_at)  # what a UART at the wrong rate reads
    assert b"\n" not in garbled  # no line end survives: one endless line
    caplog.set_level(logging.WARNING, "collectors.emonpi")
    async with running(fast_config(pty_pair.path, baudrate=read_at, max_line=256)) as r:
        await wait_until(lambda: r.stat("connects") == 1)
        await pty_pair.write(garbled + b"\n")
        await wait_until(lambda: r.stat("overlong") == 1)
        assert r.points == []
        # then the right data still decodes
        await pty_pair.write(CLASSIC)
        await wait_until(lambda: len(r.points) == 1)
        stats = {k: v for k, v in r.collector.stats().items() if v}
    assert stats == {"overlong": 1, "lines": 1, "frames": 1, "points": 1, "connects": 1}
    warnings = [rec.getMessage() for rec in caplog.records if "baud" in rec.getMessage()]
    assert len(warnings) == 1
    assert f"the baud rate {read_at} is probably wrong (try {sent_at}" in warnings[0]


async def test_reconnects_when_the_linked_port_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "collectors.emonpi")
    link = tmp_path / "usb-OpenEnergyMonitor_emonTx4-if00"
    first = Pty()
    link.symlink_to(first.path)
    second: Pty | None = None
    try:
        async with running(fast_config(str(link))) as r:
            await wait_until(lambda: r.stat("connects") == 1)
            await first.write(b"\r\n" + CLASSIC)
            await wait_until(lambda: len(r.points) == 1)
            first.close()  # unplugged
            await wait_until(lambda: r.stat("disconnects") == 1)
            second = Pty()  # plugged back in: a new device node, the same by-id link
            tmp = tmp_path / "link.new"
            tmp.symlink_to(second.path)
            os.replace(tmp, link)
            await wait_until(lambda: r.stat("connects") == 2)
            await second.write(b"\r\n" + CLASSIC)
            await wait_until(lambda: len(r.points) == 2)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert r.points[1].fields["vrms_volts"] == r.points[0].fields["vrms_volts"] == 241.37
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1 and "port lost: device reports readiness" in warnings[0]
    assert "only one may own it" in warnings[0]
    assert any("port is back after" in rec.getMessage() for rec in caplog.records)


async def test_missing_port_is_retried_until_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "collectors.emonpi")
    link = tmp_path / "ttyEMON"
    pty = Pty()
    try:
        async with running(fast_config(str(link))) as r:
            await wait_until(lambda: r.stat("open_errors") >= 3)
            assert r.stat("connects") == 0
            link.symlink_to(pty.path)
            await wait_until(lambda: r.stat("connects") == 1)
            await pty.write(b"\r\n" + CLASSIC)
            await wait_until(lambda: len(r.points) == 1)
    finally:
        pty.close()
    messages = [rec.getMessage() for rec in caplog.records]
    assert len(messages) == 1
    assert "cannot open" in messages[0] and "no such device (USB unplugged?" in messages[0]


async def test_a_second_reader_is_refused_with_a_reason(
    pty_pair: Pty, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "collectors.emonpi")
    async with running(fast_config(pty_pair.path)) as first:
        await wait_until(lambda: first.stat("connects") == 1)
        async with running(fast_config(pty_pair.path)) as second:
            await wait_until(lambda: second.stat("open_errors") >= 2)
            assert second.stat("connects") == 0
        await pty_pair.write(b"\r\n" + CLASSIC)
        await wait_until(lambda: len(first.points) == 1)
    assert any("another nrg-collect holds the port" in rec.getMessage() for rec in caplog.records)


async def test_commands_are_sent_after_opening(pty_pair: Pty) -> None:
    config = fast_config(pty_pair.path, commands=["5i", "210g", "1q"])
    got = b""
    async with running(config) as r:
        await wait_until(lambda: r.stat("connects") == 1)

        def read() -> bool:
            nonlocal got
            got += pty_pair.read_available()
            return got.count(b"\r\n") == 3

        await wait_until(read)
    assert got == b"5i\r\n210g\r\n1q\r\n"


async def test_open_without_port_says_which_were_tried(tmp_path: Path) -> None:
    collector = EmonPiCollector(EmonPiConfig(root=str(tmp_path)))
    with pytest.raises(NoData) as info:
        await collector.open()
    message = str(info.value)
    for name in ("dev/ttyAMA0", "dev/serial0", "dev/ttyUSB0"):
        assert str(tmp_path / name) in message
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "ttyUSB0").touch()
    await collector.open()
    assert collector.port == str(tmp_path / "dev" / "ttyUSB0")
    assert collector.describe().startswith(f"{tmp_path}/dev/ttyUSB0 at 38400 baud; layouts: ")


def test_simulator_writes_to_a_given_port(
    pty_pair: Pty, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--port", pty_pair.path, "--count", "3", "--interval", "0", "--banner"]) == 0
    out = b""
    while chunk := pty_pair.read_available():
        out += chunk
    lines = out.split(b"\r\n")
    assert lines[-1] == b""
    frames = [parse_line(line) for line in lines if line.startswith(b"OK")]
    assert len(frames) == 3 and len(lines) == 3 + 12 + 1
    assert all(f.node == 5 and len(f.payload) == 24 for f in frames)  # type: ignore[union-attr]
    out_text = capsys.readouterr().out
    assert f"on {pty_pair.path}" in out_text and "15 lines written, 0 dropped" in out_text


async def test_simulator_process_feeds_the_collector(tmp_path: Path) -> None:
    link = tmp_path / "emonpi-sim"
    args = ["--layout", "emontx4", "--format", "kv", "--interval", "0.02", "--link", str(link)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "collectors.emonpi.sim",
        *args,
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        first = (await proc.stdout.readline()).decode()
        assert first.startswith("emonpi-sim: emontx4 (kv) from node 17 every 0.02 s on /dev/")
        async with running(fast_config(str(link), baudrate=115200)) as r:
            await wait_until(lambda: len(r.points) >= 3)
    finally:
        proc.terminate()
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    assert b"lines written" in out
    assert not link.exists()  # the simulator removes its link on SIGTERM
    point = r.points[-1]
    assert point.tags == {"node": "serial", "layout": "key_value"}
    assert {"msg_count", "vrms_volts", "power1_watts", "energy1_wh", "energy1_joules"} <= set(
        point.fields
    )


# --- probe for `nrg-collect list` ----------------------------------------------------------------


async def test_probe_opens_a_real_port_and_reads_one_line(pty_pair: Pty) -> None:
    from collectors.emonpi import MSG_PROBE_OPENED

    collector = EmonPiCollector(fast_config(pty_pair.path, baudrate=38400))
    await collector.open()
    opened = MSG_PROBE_OPENED.format(port=pty_pair.path, baud=38400)
    assert await collector.probe() == opened

    async def device() -> None:
        # A cut line, then a whole classic frame (node 5, 24 bytes).
        await asyncio.sleep(0.2)
        await pty_pair.write(b"5 0 0 (-0)\r\n" + CLASSIC)

    feeder = asyncio.create_task(device())
    try:
        said = await collector.probe(wait_s=5.0)
    finally:
        await feeder
    assert said == opened + "; first line: a frame from node 5 (layout emonpi_classic)"


async def test_probe_says_why_a_port_cannot_be_opened(tmp_path: Path) -> None:
    from collectors.emonpi import MSG_PROBE_FAILED

    missing = str(tmp_path / "ttyUSB7")
    collector = EmonPiCollector(fast_config(missing))
    await collector.open()  # a configured port is taken as given
    with pytest.raises(NoData) as info:
        await collector.probe()
    text = str(info.value)
    assert text.startswith(MSG_PROBE_FAILED.format(port=missing, reason="")[:-1])
    assert "no such device" in text


async def test_probe_of_a_port_held_by_another_reader(pty_pair: Pty) -> None:
    config = fast_config(pty_pair.path)
    async with running(config) as state:
        await wait_until(lambda: state.stat("connects") == 1)
        prober = EmonPiCollector(config)
        await prober.open()
        with pytest.raises(NoData) as info:
            await prober.probe()
    assert "another nrg-collect holds the port" in str(info.value)
