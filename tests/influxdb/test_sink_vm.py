"""The sink against a real VictoriaMetrics: exact read-back, outage, restart, spill, quota."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from tests.influxdb.helpers import T0_NS, make_points, make_sink, until
from tests.servers import VictoriaMetrics, have

pytestmark = pytest.mark.server


def expected(start: int, n: int) -> list[tuple[int, float]]:
    return [(T0_NS // 1_000_000 + i, float(i)) for i in range(start, start + n)]


async def test_every_point_stored_exactly_once(
    vm: VictoriaMetrics, context: PluginContext, run_id: str
) -> None:
    sink = make_sink(context, vm.url)
    await sink.open()
    for k in range(3):
        await sink.write(make_points(1000 * k, 1000))
    assert sink.status() == "ok"
    await sink.aclose()
    assert vm.points(run_id, "m_v") == expected(0, 3000)
    assert vm.points(run_id, "m_n") == expected(0, 3000)
    (series,) = vm.export(run_id, "m_v")
    assert series["metric"] == {"__name__": "m_v", "k": "a", "host": "testhost", "run": run_id}
    assert sink.stats()["sent_points"] == 3000
    assert sink.stats()["requests"] == 3


async def test_gzip(vm: VictoriaMetrics, context: PluginContext, run_id: str) -> None:
    sink = make_sink(context, vm.url, gzip=True)
    await sink.open()
    await sink.write(make_points(0, 500))
    await sink.aclose()
    assert vm.points(run_id, "m_v") == expected(0, 500)


async def test_outage_spools_then_replays_everything_once(
    vm: VictoriaMetrics, context: PluginContext, run_id: str
) -> None:
    sink = make_sink(context, vm.url)
    await sink.open()
    await sink.write(make_points(0, 100))
    await sink.flush()
    vm.stop()
    await sink.write(make_points(100, 100))  # fails, goes to the spool
    await sink.flush()
    assert sink.status().startswith("retrying (")
    assert sink.status().endswith("spooling 100 points")
    await sink.write(make_points(200, 100))  # spool not empty: straight to it
    sink.spill(make_points(300, 100))  # the core's overflow path
    assert sink.spool.points == 300
    await until(lambda: sink.retries >= 2, "two failed replay attempts")
    assert sink.stats()["sent_points"] == 100
    vm.start()
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    assert sink.status() == "ok"
    await sink.write(make_points(400, 100))  # direct again
    await sink.aclose()
    stats = sink.stats()
    assert (stats["sent_points"], stats["replayed_points"], stats["spooled_points"]) == (
        200,
        300,
        300,
    )
    assert (stats["spool_points"], stats["spool_bytes"], stats["spool_dropped_points"]) == (0, 0, 0)
    assert vm.points(run_id, "m_v") == expected(0, 500)


async def test_next_start_replays_what_the_last_run_left(
    vm: VictoriaMetrics, context: PluginContext, run_id: str, tmp_path: Path
) -> None:
    vm.stop()
    first = make_sink(context, vm.url, drain_timeout=0.0)
    await first.open()
    for k in range(5):
        await first.write(make_points(100 * k, 100))
    await first.aclose()
    assert first.spool.points == 500
    assert list(first.spool.directory.glob("seg-*.nrgspool"))

    vm.start()
    second = make_sink(context, vm.url)
    await second.open()
    assert second.status() == "replaying 500 points"
    await second.write(make_points(500, 100))  # new points queue behind the old ones
    await until(lambda: second.spool.records == 0, "the spool to drain")
    await second.aclose()
    assert second.stats()["replayed_points"] == 600
    assert vm.points(run_id, "m_v") == expected(0, 600)


async def test_quota_drops_are_counted_and_the_rest_arrives(
    vm: VictoriaMetrics, context: PluginContext, run_id: str
) -> None:
    encoder = make_sink(context, vm.url)._encoder
    quota = sum(len(encoder.encode_many(make_points(100 * k, 100))) + 20 for k in range(3))
    sink = make_sink(context, vm.url, spool_max_bytes=quota)
    await sink.open()
    vm.stop()
    for k in range(6):
        await sink.write(make_points(100 * k, 100))
    await sink.flush()
    stats = sink.stats()
    assert (stats["spool_points"], stats["spool_dropped_points"]) == (300, 300)
    vm.start()
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    await sink.aclose()
    assert vm.points(run_id, "m_v") == expected(0, 300)


async def test_torn_record_from_a_power_loss_is_skipped_and_counted(
    vm: VictoriaMetrics, context: PluginContext, run_id: str
) -> None:
    vm.stop()
    first = make_sink(context, vm.url, drain_timeout=0.0)
    await first.open()
    for k in range(3):
        await first.write(make_points(100 * k, 100))
    await first.aclose()
    (segment,) = first.spool.directory.glob("seg-*.nrgspool")
    with open(segment, "r+b") as f:  # the last record never fully reached the disk
        f.truncate(segment.stat().st_size - 100)

    vm.start()
    second = make_sink(context, vm.url)
    await second.open()
    await second.wait_drained()
    await second.aclose()
    stats = second.stats()
    assert (stats["spool_torn_records"], stats["replayed_points"]) == (1, 200)
    assert vm.points(run_id, "m_v") == expected(0, 200)


def test_the_silent_drop_check_is_not_vacuous(tmp_path: Path) -> None:
    """What the ``vm`` fixture asserts after every test does move on a silent drop, and survives
    a restart of the server."""
    if not have("victoria-metrics"):
        pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics)")
    server = VictoriaMetrics(tmp_path / "vm-data")
    server.start()
    try:
        # A line that does not parse, and one from 2032 (more than 2 days ahead).
        body = b"m v=1 1763000000000000000\nm,x v= 5\nm v=2 1963000000000000000\n"
        req = urllib.request.Request(
            f"{server.url}/api/v2/write?bucket=b&org=o&precision=ns", data=body
        )
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 204  # VictoriaMetrics answers 204 all the same
        server.stop()
        server.start()
        assert server.total_counters() == {
            "vm_rows_ignored_total": 1.0,
            "vm_rows_invalid_total": 1.0,
        }
    finally:
        server.stop()
