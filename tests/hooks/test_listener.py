"""The hooks listener on a real Unix socket: accepted lines, rejects by reason, limits, peers."""

from __future__ import annotations

import asyncio
import itertools
import os
import pwd
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.config import PluginSpec
from acquisition.errors import ConfigError, NoData
from acquisition.lineproto import INT_RANGE_ERROR
from acquisition.point import Point
from acquisition.registry import build_plugin
from collectors.hooks import HooksCollector, HooksConfig, fallback_file_pid

STEP = (
    b"nrg_step,experiment=e1,rank=0,run=r1 step=3i,epoch=1i,start_time_ns=1000i,"
    b"end_time_ns=2000i,duration_seconds=1e-06 2000\n"
)


def make_context(tmp: Path) -> PluginContext:
    return PluginContext(
        host="testhost", interval_s=1.0, state_dir=tmp, data_dir=tmp, runtime_dir=tmp / "run"
    )


class Listener:
    """A HooksCollector opened and running, with the points it emitted."""

    def __init__(self, collector: HooksCollector, context: PluginContext) -> None:
        self.collector = collector
        self.context = context
        self.points: list[Point] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.collector.open()
        self.task = asyncio.create_task(self.collector.run(self.points.append))

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.collector.aclose()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait for the listener to reach ``condition`` (a state, not a duration)."""
        for _ in range(2000):
            if condition():
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"listener never reached the state; stats {self.collector.stats()}")


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # Unix socket addresses are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="nrg-hooks-") as d:
        yield Path(d)


async def start_listener(tmp: Path, **options: object) -> Listener:
    context = make_context(tmp)
    options.setdefault("ingest_dir", str(tmp / "spool"))  # never the user's real spool
    config = HooksConfig(socket_path=str(tmp / "hooks.sock"), **options)  # type: ignore[arg-type]
    listener = Listener(HooksCollector(config, context), context)
    await listener.start()
    return listener


async def send(path: Path, payload: bytes) -> None:
    _reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(payload)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_accepts_nrg_lines_and_stamps_host(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp)
    try:
        await send(short_tmp / "hooks.sock", STEP + b'nrg_run,run=r1 event="end",pid=7i 5\n')
        await listener.until(
            lambda: (
                listener.collector.stats()["connections_total"] == 1
                and listener.collector.stats()["connections_open"] == 0
            )
        )
    finally:
        await listener.stop()
    me = str(os.getpid())  # this test process is the peer
    assert listener.points == [
        Point(
            "nrg_step",
            {"experiment": "e1", "rank": "0", "run": "r1", "host": "testhost", "pid": me},
            {
                "step": 3,
                "epoch": 1,
                "start_time_ns": 1000,
                "end_time_ns": 2000,
                "duration_seconds": 1e-06,
            },
            2000,
        ),
        Point(
            "nrg_run", {"run": "r1", "host": "testhost", "pid": me}, {"event": "end", "pid": 7}, 5
        ),
    ]
    assert listener.collector.stats()["lines_accepted"] == 2


async def test_rejects_foreign_overlong_broken_and_truncated_lines(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp, max_line_bytes=200)
    overlong = b'nrg_step,run=r1 note="' + b"x" * 300 + b'" 1\n'
    payload = (
        b"cpu,host=evil usage_ratio=1.0 1\n"  # foreign measurement
        + overlong
        + b"nrg_step step=\n"  # syntax
        + b"nrg_step,run=\xff\xfe step=1i 1\n"  # not UTF-8
        + b"# a comment, ignored\n\n"
        + STEP
        + b"nrg_step,run=r1 step=4i"  # no final newline: the sender died mid-line
    )
    try:
        # Sent in small pieces so lines (and the overlong one) straddle reads.
        _reader, writer = await asyncio.open_unix_connection(str(short_tmp / "hooks.sock"))
        for i in range(0, len(payload), 7):
            writer.write(payload[i : i + 7])
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        await listener.until(lambda: listener.collector.stats()["rejected_truncated"] == 1)
    finally:
        await listener.stop()
    stats = listener.collector.stats()
    assert [p.measurement for p in listener.points] == ["nrg_step"]
    assert listener.points[0].fields["step"] == 3
    assert {k: v for k, v in stats.items() if k.startswith(("rejected_", "lines_"))} == {
        "lines_accepted": 1,
        "lines_ingested": 0,
        "rejected_too_long": 1,
        "rejected_encoding": 1,
        "rejected_syntax": 1,
        "rejected_range": 0,
        "rejected_measurement": 1,
        "rejected_truncated": 1,
    }


async def test_overlong_line_does_not_end_the_connection(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp, max_line_bytes=200)
    try:
        await send(short_tmp / "hooks.sock", b'nrg_x,a=b f="' + b"y" * 100_000 + b'" 1\n' + STEP)
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
    finally:
        await listener.stop()
    assert listener.collector.stats()["rejected_too_long"] == 1
    assert [p.measurement for p in listener.points] == ["nrg_step"]


async def test_socket_is_0600_and_removed_on_close(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp)
    path = short_tmp / "hooks.sock"
    mode = path.lstat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    await listener.stop()
    assert not path.exists()


async def test_default_path_is_runtime_dir_unless_nrg_socket(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = make_context(short_tmp)
    monkeypatch.delenv("NRG_SOCKET", raising=False)
    assert HooksCollector(HooksConfig(), context).path == short_tmp / "run" / "hooks.sock"
    monkeypatch.setenv("NRG_SOCKET", str(short_tmp / "env.sock"))
    assert HooksCollector(HooksConfig(), context).path == short_tmp / "env.sock"
    explicit = HooksConfig(socket_path=str(short_tmp / "cfg.sock"))
    assert HooksCollector(explicit, context).path == short_tmp / "cfg.sock"
    # The default directory is created private.
    collector = HooksCollector(HooksConfig(socket_path=str(short_tmp / "d" / "h.sock")), context)
    await collector.open()
    try:
        assert stat.S_IMODE((short_tmp / "d").stat().st_mode) == 0o700
    finally:
        await collector.aclose()


async def test_peer_pid_is_tracked_while_connected(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp)
    status = listener.context.status
    try:
        _reader, writer = await asyncio.open_unix_connection(str(short_tmp / "hooks.sock"))
        writer.write(STEP)
        await writer.drain()
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
        assert status["tracked_pids"] == {os.getpid()}
        writer.close()
        await writer.wait_closed()
        await listener.until(lambda: listener.collector.stats()["connections_open"] == 0)
        assert status["tracked_pids"] == set()
    finally:
        await listener.stop()


async def test_connection_limit(short_tmp: Path) -> None:
    listener = await start_listener(short_tmp, max_connections=2)
    path = str(short_tmp / "hooks.sock")
    try:
        held = [await asyncio.open_unix_connection(path) for _ in range(2)]
        await listener.until(lambda: listener.collector.stats()["connections_open"] == 2)
        reader, writer = await asyncio.open_unix_connection(path)
        assert await reader.read() == b""  # closed by the listener without reading
        writer.close()
        stats = listener.collector.stats()
        assert stats["connections_refused_limit"] == 1
        assert stats["connections_open"] == 2
        for _, w in held:
            w.close()
    finally:
        await listener.stop()


async def test_close_drains_what_peers_sent(short_tmp: Path) -> None:
    """aclose() while a job is still connected: everything it sent is emitted, then it gets EOF."""
    listener = await start_listener(short_tmp)
    lines = [
        f"nrg_module,module=fc{i},phase=forward step={i}i,calls=1i,exclusive_seconds=0.5 {i}\n"
        for i in range(500)
    ]
    reader, writer = await asyncio.open_unix_connection(str(short_tmp / "hooks.sock"))
    writer.write("".join(lines).encode())
    await writer.drain()
    await listener.until(lambda: listener.collector.stats()["connections_open"] == 1)
    await listener.stop()
    assert [p.fields["step"] for p in listener.points] == list(range(500))
    assert await reader.read() == b""
    writer.close()


async def test_stale_socket_is_replaced_live_one_is_not(short_tmp: Path) -> None:
    path = short_tmp / "hooks.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays; nobody listens: an agent that died
    listener = await start_listener(short_tmp)
    try:
        second = HooksCollector(HooksConfig(socket_path=str(path)), make_context(short_tmp))
        with pytest.raises(NoData, match="already listens"):
            await second.open()
        await send(path, STEP)
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
    finally:
        await listener.stop()


async def test_path_that_is_not_a_socket_is_a_config_error(short_tmp: Path) -> None:
    (short_tmp / "hooks.sock").write_text("not a socket")
    collector = HooksCollector(
        HooksConfig(socket_path=str(short_tmp / "hooks.sock")), make_context(short_tmp)
    )
    with pytest.raises(ConfigError, match="not a socket"):
        await collector.open()


def test_config_keys_through_the_registry(short_tmp: Path) -> None:
    spec = PluginSpec(
        "collectors",
        "hooks",
        {"socket_path": "/x/h.sock", "max_line_bytes": "1KiB", "allowed_uids": [1000]},
    )
    collector = build_plugin(spec, make_context(short_tmp))
    assert isinstance(collector, HooksCollector)
    assert collector.path == Path("/x/h.sock")
    assert collector._config.max_line_bytes == 1024
    with pytest.raises(ConfigError, match="max_connections"):
        build_plugin(
            PluginSpec("collectors", "hooks", {"max_connections": 0}), make_context(short_tmp)
        )
    with pytest.raises(ConfigError, match="unknown key 'port'"):
        build_plugin(PluginSpec("collectors", "hooks", {"port": 1}), make_context(short_tmp))


# --- a second user -------------------------------------------------------------------------------

_AS_NOBODY = textwrap.dedent(
    """
    import os, socket, sys
    os.setgroups([])
    os.setgid({gid})
    os.setuid({uid})
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect({path!r})
    except PermissionError:
        print("EACCES")
        sys.exit(0)
    try:
        s.sendall(b"nrg_step,run=intruder step=1i 1\\n")
        s.shutdown(socket.SHUT_WR)
        print("CONNECTED", repr(s.recv(100)))
    except (BrokenPipeError, ConnectionResetError):
        print("CONNECTED, then closed")
    """
)


def as_nobody(path: Path) -> str:
    nobody = pwd.getpwnam("nobody")
    code = _AS_NOBODY.format(uid=nobody.pw_uid, gid=nobody.pw_gid, path=str(path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run a child process as the user 'nobody'"
)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    # A directory other users may traverse, so that only the socket's own mode stands in the way.
    with tempfile.TemporaryDirectory(prefix="nrg-hooks-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


@needs_root
async def test_second_user_cannot_connect_to_the_0600_socket(shared_tmp: Path) -> None:
    listener = await start_listener(shared_tmp)
    try:
        result = await asyncio.to_thread(as_nobody, shared_tmp / "hooks.sock")
    finally:
        await listener.stop()
    assert result == "EACCES"
    assert listener.points == []


@needs_root
async def test_second_user_is_refused_by_peer_credentials(shared_tmp: Path) -> None:
    """Even when the file mode lets them in (a mistaken chmod), other users' lines are refused."""
    listener = await start_listener(shared_tmp)
    os.chmod(shared_tmp / "hooks.sock", 0o666)
    try:
        result = await asyncio.to_thread(as_nobody, shared_tmp / "hooks.sock")
        await listener.until(lambda: listener.collector.stats()["connections_refused_uid"] == 1)
    finally:
        await listener.stop()
    assert result in ("CONNECTED b''", "CONNECTED, then closed")
    assert listener.points == []
    assert listener.collector.stats()["connections_open"] == 0


# --- fallback files -----------------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_fallback_file_pid() -> None:
    assert fallback_file_pid("nrg-r1-1234.lp") == 1234
    assert fallback_file_pid("nrg-lr-3e-4-77.lp") == 77
    assert fallback_file_pid("nrg-r1-1234.lp.ingesting") == 1234
    assert fallback_file_pid("nrg-r1-1234.lp.ingested") is None
    assert fallback_file_pid("other-1234.lp") is None
    assert fallback_file_pid("nrg-r1-x.lp") is None


async def test_ingests_fallback_files_of_exited_jobs_only(short_tmp: Path) -> None:
    spool = short_tmp / "spool"
    spool.mkdir()
    gone = dead_pid()
    (spool / f"nrg-r1-{gone}.lp").write_bytes(STEP + b"cpu usage_ratio=1.0 1\n")
    # Left by an agent that died while ingesting: taken again.
    (spool / f"nrg-r2-{gone}.lp.ingesting").write_bytes(STEP.replace(b"run=r1", b"run=r2"))
    live = spool / f"nrg-r3-{os.getpid()}.lp"  # its job still runs and may append
    live.write_bytes(STEP)
    (spool / "notes.txt").write_text("not ours")
    listener = await start_listener(short_tmp, ingest_dir=str(spool))
    try:
        await listener.until(lambda: listener.collector.stats()["files_ingested"] == 2)
    finally:
        await listener.stop()
    stats = listener.collector.stats()
    assert stats["lines_ingested"] == 2
    assert stats["rejected_measurement"] == 1
    assert sorted(p.tags["run"] for p in listener.points) == ["r1", "r2"]
    assert all(p.tags["host"] == "testhost" for p in listener.points)
    assert [p.tags["pid"] for p in listener.points] == [str(gone), str(gone)]
    assert sorted(os.listdir(spool)) == sorted(
        [
            f"nrg-r1-{gone}.lp.ingested",
            f"nrg-r2-{gone}.lp.ingested",
            live.name,
            "notes.txt",
        ]
    )


async def test_ingest_can_be_turned_off(short_tmp: Path) -> None:
    spool = short_tmp / "spool"
    spool.mkdir()
    (spool / f"nrg-r1-{dead_pid()}.lp").write_bytes(STEP)
    listener = await start_listener(short_tmp, ingest=False)
    try:
        await send(short_tmp / "hooks.sock", STEP)
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
    finally:
        await listener.stop()
    assert listener.collector.stats()["files_ingested"] == 0
    assert len(listener.points) == 1


async def test_agent_measurements_from_a_job_are_rejected_counted_and_logged_once(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    forged = (
        b"nrg_collect,plugin=influxdb,kind=sink lost_points=0i 1\n"
        b"nrg_energy,source=rapl:package-0 energy_joules=1.0 1\n"
        b"nrg_collect,plugin=file,kind=sink lost_points=0i 2\n"
    )
    listener = await start_listener(short_tmp)
    try:
        await send(short_tmp / "hooks.sock", forged + STEP)
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
    finally:
        await listener.stop()
    assert [p.measurement for p in listener.points] == ["nrg_step"]
    assert listener.collector.stats()["rejected_measurement"] == 3
    logged = [r for r in caplog.records if "rejected a line" in r.getMessage()]
    assert len(logged) == 1
    assert "'nrg_collect'" in logged[0].getMessage()


async def test_out_of_range_integers_and_timestamps_are_rejected_and_logged_once(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    payload = (
        b"nrg_step,run=r1 step=99999999999999999999i 5\n"
        b"nrg_step,run=r1 step=1i 99999999999999999999999\n"
        b"nrg_step,run=r1 step=-9223372036854775809i 5\n"
    )
    listener = await start_listener(short_tmp)
    try:
        await send(short_tmp / "hooks.sock", payload + STEP)
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 1)
    finally:
        await listener.stop()
    assert [p.fields["step"] for p in listener.points] == [3]
    assert listener.collector.stats()["rejected_range"] == 3
    logged = [r for r in caplog.records if "rejected a line" in r.getMessage()]
    assert len(logged) == 1
    first = INT_RANGE_ERROR.format(key="step", measurement="nrg_step", value=99999999999999999999)
    assert f"(range: {first})" in logged[0].getMessage()


async def test_job_points_carry_the_peer_pid_and_rank_from_its_environment(
    short_tmp: Path,
) -> None:
    """A real job process with RANK=3 sends a step without a rank tag and with a forged pid."""
    listener = await start_listener(short_tmp)
    script = textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.connect({str(short_tmp / "hooks.sock")!r})
        s.sendall(b"nrg_step,run=r1,pid=1 step=1i 10\\nnrg_step,run=r1,rank=0 step=2i 20\\n")
        s.close()
        """
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, env={**os.environ, "RANK": "3"}
        )
        assert await proc.wait() == 0
        await listener.until(lambda: listener.collector.stats()["lines_accepted"] == 2)
    finally:
        await listener.stop()
    assert [(p.tags["pid"], p.tags["rank"]) for p in listener.points] == [
        (str(proc.pid), "3"),  # the environment's rank where the line has none
        (str(proc.pid), "0"),  # the line's own rank wins
    ]


async def test_a_flood_of_lines_gives_the_event_loop_back_between_slices(short_tmp: Path) -> None:
    # A job sending dense garbage (2 bytes a line) must not hold the agent's event loop, and with
    # it the collectors' ticks, for as long as it keeps the socket's buffer full.
    collector = HooksCollector(HooksConfig(ingest=False), make_context(short_tmp))
    reader = asyncio.StreamReader()
    reader.feed_data(b"x\n" * (512 * 1024))  # 1 MiB, all of it already received
    reader.feed_eof()
    most = await most_rejects_between_turns(collector, collector._read(reader, {}))
    assert collector.stats()["rejected_syntax"] == 512 * 1024
    assert most <= 64 * 1024, f"{most} lines (2 bytes each) parsed without a turn of the loop"


async def test_ingesting_a_file_of_garbage_gives_the_event_loop_back(short_tmp: Path) -> None:
    spool = short_tmp / "spool"
    spool.mkdir()
    (spool / f"nrg-r1-{dead_pid()}.lp").write_bytes(b"x\n" * (512 * 1024))
    collector = HooksCollector(HooksConfig(ingest_dir=str(spool)), make_context(short_tmp))
    most = await most_rejects_between_turns(collector, collector.ingest_fallback_files())
    assert collector.stats()["rejected_syntax"] == 512 * 1024
    assert most <= 64 * 1024, f"{most} lines (2 bytes each) parsed without a turn of the loop"


async def most_rejects_between_turns(
    collector: HooksCollector, work: Coroutine[Any, Any, None]
) -> int:
    """The most lines ``work`` rejected between two turns of another task."""
    seen = [0]
    done = False

    async def ticker() -> None:
        while not done:
            await asyncio.sleep(0)
            seen.append(int(collector.stats()["rejected_syntax"]))

    other = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is running
    await work
    done = True
    await other
    return max(b - a for a, b in itertools.pairwise(seen))


async def test_a_socket_directory_others_could_write_or_own_is_refused(short_tmp: Path) -> None:
    from collectors.hooks import MSG_DIR_OWNER, MSG_DIR_WRITABLE, HooksCollector, HooksConfig

    shared = short_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    config = HooksConfig(socket_path=str(shared / "h.sock"), ingest=False)
    with pytest.raises(ConfigError) as err:
        await HooksCollector(config, make_context(short_tmp)).open()
    assert str(err.value) == MSG_DIR_WRITABLE.format(dir=shared, mode=0o777)
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot remove or replace our socket
    sticky = HooksCollector(
        HooksConfig(socket_path=str(shared / "h.sock"), ingest=False), make_context(short_tmp)
    )
    await sticky.open()
    assert (shared / "h.sock").exists()
    await sticky.aclose()
    if os.getuid() == 0:
        theirs = short_tmp / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        config = HooksConfig(socket_path=str(theirs / "h.sock"), ingest=False)
        with pytest.raises(ConfigError) as err:
            await HooksCollector(config, make_context(short_tmp)).open()
        assert str(err.value) == MSG_DIR_OWNER.format(dir=theirs, owner=65534, uid=0)
