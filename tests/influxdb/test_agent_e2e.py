"""The real ``nrg-collect`` at 10 Hz into a real VictoriaMetrics: normal flow, outage, kill -9, quota.

A file sink runs beside the InfluxDB sink on the same bus and serves as the reference: whatever
the agent produced is in the ``.lp`` file, and must be in the server exactly once (after the
VictoriaMetrics mapping: metric ``<measurement>_<field>``, tags as labels, milliseconds, numbers as
float64 kept to ~12 significant digits, strings as 0). What the spool holds after a crash is read from its segment files.
"""

from __future__ import annotations

import collections
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.lineproto import decode_line
from sinks.influxdb.spool import parse_segment
from tests.servers import Influxd, V2Translator, VictoriaMetrics

pytestmark = [pytest.mark.server, pytest.mark.slow]

NRG_COLLECT = Path(sys.executable).with_name("nrg-collect")
Sample = tuple[str, frozenset[tuple[str, str]], int, float]
BATCH = 50
BUFFER = 200


_started: list[AgentProcess] = []


@pytest.fixture(autouse=True)
def _kill_leftover_agents() -> Iterator[None]:
    yield
    while _started:
        _started.pop().kill()


class AgentProcess:
    """One ``nrg-collect --config`` child, with its log in ``log_path``."""

    def __init__(self, tmp: Path, run_id: str, url: str, **influx: Any) -> None:
        self.tmp = tmp
        self.lp = tmp / "reference.lp"
        self.log_path = tmp / "agent.log"
        options = {"url": url, "bucket": "nrg", "retry_initial": "50ms", "retry_max": "500ms"}
        options.update(influx)
        sink = "\n".join(f"{k} = {_toml(v)}" for k, v in options.items())
        (tmp / "cfg.toml").write_text(
            f"""
[agent]
interval = "100ms"
run = "{run_id}"
host = "e2e"
state_dir = "{tmp / "state"}"
data_dir = "{tmp / "data"}"
stats_interval = "500ms"
flush_interval = "200ms"
batch_size = {BATCH}
buffer_limit = {BUFFER}

[[collectors.procfs]]
per_core = false

[[sinks.file]]
path = "{self.lp}"
fsync = "never"

[[sinks.influxdb]]
{sink}
"""
        )
        self.proc: subprocess.Popen[bytes] | None = None
        _started.append(self)

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(
            [str(NRG_COLLECT), "--config", str(self.tmp / "cfg.toml"), "--quiet"],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        # Python start-up and imports take seconds on a loaded machine: wait for the agent's
        # "collecting from ..." line (a hang guard, not a timing assertion).
        deadline = time.monotonic() + 300
        start = self.log_path.stat().st_size
        while b"collecting from" not in self.log_path.read_bytes()[start:]:
            assert self.proc.poll() is None, f"nrg-collect exited: {self.log()}"
            assert time.monotonic() < deadline, "nrg-collect did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        """Teardown after a failed test: never leave an agent behind."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self._log.close()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(60)
        finally:
            self._log.close()
        self.proc = None
        return rc

    def log(self) -> str:
        return self.log_path.read_text()

    def spool_dirs(self) -> list[Path]:
        return sorted((self.tmp / "state" / "spool").glob("influxdb-*"))


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def samples_of_line(line: str) -> list[Sample]:
    point = decode_line(line)
    labels = frozenset(point.tags.items())
    out = []
    for name, value in point.fields.items():
        number = 0.0 if isinstance(value, str) else float(value)
        out.append((f"{point.measurement}_{name}", labels, point.time_ns // 1_000_000, number))
    return out


def samples_of_file(path: Path) -> collections.Counter[Sample]:
    counts: collections.Counter[Sample] = collections.Counter()
    for line in path.read_text().splitlines():
        if line:
            counts.update(samples_of_line(line))
    return counts


def samples_of_server(vm: VictoriaMetrics, run_id: str) -> collections.Counter[Sample]:
    counts: collections.Counter[Sample] = collections.Counter()
    for series in vm.export(run_id):
        labels = dict(series["metric"])
        name = labels.pop("__name__")
        key = frozenset(labels.items())
        for ts, value in zip(series["timestamps"], series["values"], strict=True):
            counts[(name, key, ts, float(value))] += 1
    return counts


def spooled_lines(directory: Path) -> list[str]:
    lines: list[str] = []
    for seg in sorted(directory.glob("seg-*.nrgspool")):
        data = seg.read_bytes()
        for rec in parse_segment(data, 0)[0]:
            payload = data[rec.offset + 20 : rec.offset + rec.size]
            lines.extend(x for x in payload.decode().split("\n") if x)
    return lines


def last_sink_stats(lp: Path, plugin: str = "influxdb") -> dict[str, Any]:
    stats = [
        decode_line(line)
        for line in lp.read_text().splitlines()
        if line.startswith("nrg_collect,") and f"plugin={plugin}," in line
    ]
    assert stats, "no nrg_collect self-stats for the sink"
    return dict(stats[-1].fields)


def assert_exactly_once(
    expected: collections.Counter[Sample],
    stored: collections.Counter[Sample],
    lost_answer_batch: int = 0,
) -> None:
    """Same samples, each as often; values equal to VictoriaMetrics' ~12 significant digits."""
    want = collections.Counter(k[:3] for k in expected.elements())
    have = collections.Counter(k[:3] for k in stored.elements())
    missing, extra = want - have, have - want
    assert not missing, f"{sum(missing.values())} samples missing, e.g. {list(missing)[:3]}"
    if lost_answer_batch:
        # Stopping the server mid-request can store a body and reset the connection before
        # answering; the sink cannot know, so it sends that one batch again (at least once).
        # InfluxDB keeps one point per series and time, VictoriaMetrics keeps both: allow
        # exactly one extra copy of at most one batch of points, nothing else.
        assert all(n == 1 and have[k] == 2 for k, n in extra.items()), extra
        points = {(k[1], k[2]) for k in extra}
        assert len(points) <= lost_answer_batch, f"{len(points)} points stored twice"
        extra = collections.Counter()
    assert not extra, f"{sum(extra.values())} samples extra/duplicated, e.g. {list(extra)[:3]}"
    stored_value = {k[:3]: k[3] for k in stored}
    for key in expected:
        assert math.isclose(key[3], stored_value[key[:3]], rel_tol=1e-11), key


def test_normal_flow_stores_every_point_once(
    vm: VictoriaMetrics, tmp_path: Path, run_id: str
) -> None:
    agent = AgentProcess(tmp_path, run_id, vm.url)
    agent.start()
    time.sleep(4)
    assert agent.stop() == 0
    expected = samples_of_file(agent.lp)
    assert sum(1 for k in expected if k[0] == "memory_used_bytes") >= 30  # ~10 Hz for 4 s
    assert_exactly_once(expected, samples_of_server(vm, run_id))
    stats = last_sink_stats(agent.lp)
    assert stats["spool_dropped_points"] == 0
    assert stats["dead_lettered_points"] == 0


def test_outage_of_ten_seconds_loses_nothing(
    vm: VictoriaMetrics, tmp_path: Path, run_id: str
) -> None:
    agent = AgentProcess(tmp_path, run_id, vm.url)
    agent.start()
    time.sleep(2)
    vm.stop()
    time.sleep(11)
    vm.start()
    time.sleep(3)
    assert agent.stop() == 0
    log = agent.log()
    assert "failing (" in log
    assert "answers again; replaying the spool" in log
    expected = samples_of_file(agent.lp)
    assert_exactly_once(expected, samples_of_server(vm, run_id), lost_answer_batch=BATCH)
    # The bounded in-memory queue overflowed into the spool rather than growing or dropping.
    queue_max = max(
        int(decode_line(line).fields["queue_max_points"])
        for line in agent.lp.read_text().splitlines()
        if line.startswith("nrg_collect,") and "plugin=influxdb," in line
    )
    assert queue_max <= BUFFER
    stats = last_sink_stats(agent.lp)
    assert stats["dropped_points"] == 0
    assert stats["spool_dropped_points"] == 0
    assert stats["replayed_points"] > 0


def test_kill_9_while_the_server_is_down_then_restart(
    vm: VictoriaMetrics, tmp_path: Path, run_id: str
) -> None:
    vm.stop()
    agent = AgentProcess(tmp_path, run_id, vm.url)
    agent.start()
    time.sleep(3)
    assert agent.stop(signal.SIGKILL) == -signal.SIGKILL
    (spool_dir,) = agent.spool_dirs()
    spooled = spooled_lines(spool_dir)
    assert len(spooled) > 100
    first_run_bytes = agent.lp.stat().st_size

    vm.start()
    agent.start()
    time.sleep(2)
    assert agent.stop() == 0
    second_run = agent.lp.read_bytes()[first_run_bytes:].decode()
    expected: collections.Counter[Sample] = collections.Counter()
    for line in spooled + second_run.splitlines():
        expected.update(samples_of_line(line))
    # What the spool held at the kill arrived once, and so did all of the second run; what
    # the first run still had in memory at the kill (at most a flush interval) is gone.
    assert_exactly_once(expected, samples_of_server(vm, run_id))
    assert "left in the spool by an earlier run; replaying" in agent.log()


def test_quota_drops_are_counted_and_the_agent_lives_on(
    vm: VictoriaMetrics, tmp_path: Path, run_id: str
) -> None:
    quota = 20_000
    vm.stop()
    agent = AgentProcess(tmp_path, run_id, vm.url, spool_max_bytes=quota, drain_timeout="0s")
    agent.start()
    time.sleep(4)
    assert agent.proc is not None and agent.proc.poll() is None  # alive at the quota
    assert agent.stop() == 0
    log = agent.log()
    assert log.count("reached its quota of 20000 bytes") == 1  # once per episode
    stats = last_sink_stats(agent.lp)
    assert stats["spool_dropped_points"] > 0
    assert stats["spool_bytes"] <= quota
    (spool_dir,) = agent.spool_dirs()
    spooled = spooled_lines(spool_dir)
    assert sum(os.path.getsize(p) for p in spool_dir.glob("seg-*")) <= quota + 8
    # The oldest points stay, the newest are dropped: the spool starts with the first points
    # produced, contiguous until the quota was reached, and keeps their order throughout.
    produced = [line for line in agent.lp.read_text().splitlines() if line]
    position = {line: i for i, line in enumerate(produced)}
    where = [position[line] for line in spooled]
    assert where == sorted(where) and len(set(where)) == len(where)
    prefix = next((i for i, w in enumerate(where) if w != i), len(where))
    assert where[0] == 0 and prefix >= len(where) * 0.8, (prefix, len(where))
    assert "dropping new points until replay frees space" in log

    vm.start()
    (tmp_path / "second").mkdir()
    second = AgentProcess(tmp_path / "second", run_id + "b", vm.url, spool_dir=str(spool_dir))
    second.start()
    time.sleep(2)
    assert second.stop() == 0
    expected: collections.Counter[Sample] = collections.Counter()
    for line in spooled:
        expected.update(samples_of_line(line))
    assert_exactly_once(expected, samples_of_server(vm, run_id))


def test_outage_of_influxd_loses_nothing_and_stores_once(
    influxd: Influxd, translator: V2Translator, tmp_path: Path, run_id: str
) -> None:
    """The same outage against InfluxDB's own engine: exact values, ns timestamps, one point per
    series and time however often a batch was sent."""
    influxd.query(f'CREATE DATABASE "{run_id}"')
    token = f"{Influxd.admin_user}:{Influxd.admin_password}"
    agent = AgentProcess(tmp_path, run_id, translator.url, bucket=run_id, token=token)
    agent.start()
    time.sleep(2)
    influxd.stop()
    try:
        time.sleep(11)
    finally:
        influxd.start()
    time.sleep(3)
    assert agent.stop() == 0
    assert "answers again; replaying the spool" in agent.log()
    assert_influxd_holds_exactly(agent.lp, influxd, run_id)


def test_normal_flow_into_influxd_through_the_v1_api(
    influxd: Influxd, tmp_path: Path, run_id: str
) -> None:
    """The v1 write API with its own keys, straight into influxd 1.6 (no translator)."""
    influxd.query(f'CREATE DATABASE "{run_id}"')
    agent = AgentProcess(
        tmp_path,
        run_id,
        influxd.url,
        api="v1",
        database=run_id,
        username=Influxd.admin_user,
        password=Influxd.admin_password,
    )
    agent.start()
    time.sleep(3)
    assert agent.stop() == 0
    assert_influxd_holds_exactly(agent.lp, influxd, run_id)
    assert last_sink_stats(agent.lp)["requests"] > 0


def assert_influxd_holds_exactly(lp: Path, influxd: Influxd, db: str) -> None:
    """Every point of the file in influxd with the same fields, and nothing else."""
    expected: dict[tuple[str, frozenset[tuple[str, str]], int], dict[str, Any]] = {}
    for line in lp.read_text().splitlines():
        point = decode_line(line)
        key = (point.measurement, frozenset(point.tags.items()), point.time_ns)
        assert key not in expected
        expected[key] = dict(point.fields)
    stored: dict[tuple[str, frozenset[tuple[str, str]], int], dict[str, Any]] = {}
    for measurement in sorted({k[0] for k in expected}):
        for row in influxd.rows(f'SELECT * FROM "{measurement}" GROUP BY *', db):
            time_ns = row.pop("time")
            field_names = expected_fields(expected, measurement)
            fields = {k: v for k, v in row.items() if k in field_names and v is not None}
            # GROUP BY * lists every tag key of the measurement, "" where a series has none.
            tags = {k: v for k, v in row.items() if k not in field_names and v != ""}
            stored[(measurement, frozenset(tags.items()), time_ns)] = fields
    assert len(stored) == len(expected)
    assert stored == expected


def expected_fields(
    expected: dict[tuple[str, frozenset[tuple[str, str]], int], dict[str, Any]], measurement: str
) -> set[str]:
    return {f for k, fields in expected.items() if k[0] == measurement for f in fields}
