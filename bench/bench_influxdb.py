"""InfluxDB sink and spool benchmarks against a real VictoriaMetrics on loopback.

Each figure is printed beside a baseline measured in the same run:
- sink: 100k procfs-like points through ``InfluxDBSink.write`` in batches of ``--batch``, from
  ``Point`` objects to the server's answer, vs the ceiling: the same points encoded with the core's
  ``LineEncoder`` into one body and posted with ``influxdb-client``'s ``InfluxDBClientAsync``
  directly (one request, no sink logic). Target: the sink >= 80 % of the ceiling. The post of the
  pre-encoded body alone (encoding not timed) and the encoder alone are printed too: on a machine
  with a spare core the sink overlaps encoding a batch with the server ingesting the previous one.
- spool write: 100k points appended in batches of ``--batch`` with fsync "always" and "never",
  beside a plain ``os.write`` of the same bytes to one file (the disk's ceiling);
- spool replay: read + commit of everything from disk (no server), and the sink draining a spool
  of 100k points into the server after an outage, beside the direct-write figure above.

Alternating repetitions; the best of ``--repeat`` is reported (the machine is shared).
Run: ``.venv/bin/python bench/bench_influxdb.py [--points 100000] [--batch 5000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))  # for tests.servers (the same server fixture the tests use)

from acquisition.api import PluginContext  # noqa: E402
from acquisition.lineproto import LineEncoder  # noqa: E402
from acquisition.point import Point  # noqa: E402
from sinks.influxdb import InfluxDBConfig, InfluxDBSink  # noqa: E402
from sinks.influxdb.spool import Spool, parse_fsync_policy  # noqa: E402
from tests.servers import VictoriaMetrics, have  # noqa: E402

T0 = 1_763_000_000_000_000_000


def make_points(n: int) -> list[Point]:
    """procfs-like points: 20 series of ``process``, 1 ms apart within each series."""
    out = []
    for i in range(n):
        s = i % 20
        out.append(
            Point(
                "process",
                {"tree": str(1000 + s), "scope": "combined"},
                {
                    "cpu_seconds": 12.5 + i * 0.01,
                    "cpu_utilization_ratio": 0.125 + (i % 97) * 1e-3,
                    "rss_bytes": 123_456_789 + i,
                    "private_bytes": 100_000_000 + i,
                },
                T0 + (i // 20) * 1_000_000,
            )
        )
    return out


def context(tmp: Path, run: str) -> PluginContext:
    return PluginContext(
        host="bench",
        interval_s=1.0,
        state_dir=tmp / "state",
        data_dir=tmp,
        runtime_dir=tmp,
        tags={"host": "bench", "run": run},
    )


async def ceiling(url: str, points: list[Point], run: str) -> tuple[float, float, float]:
    """Seconds for encode + one post, for the encoding alone, for the post alone."""
    from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync
    from influxdb_client.domain.write_precision import WritePrecision

    async with InfluxDBClientAsync(url=url, token="", org="-", timeout=60_000) as client:
        api: Any = client.write_api()
        t0 = time.perf_counter()
        body = LineEncoder({"host": "bench", "run": run}).encode_many(points).encode()
        t1 = time.perf_counter()
        await api.write(bucket="nrg", record=body, write_precision=WritePrecision.NS)
        t2 = time.perf_counter()
        return t2 - t0, t1 - t0, t2 - t1


async def sink_run(url: str, tmp: Path, run: str, points: list[Point], batch: int) -> float:
    sink = InfluxDBSink(InfluxDBConfig(url=url, timeout=60.0), context(tmp, run))
    await sink.open()
    t0 = time.perf_counter()
    for i in range(0, len(points), batch):
        await sink.write(points[i : i + batch])
    await sink.flush()  # the last batch is acknowledged
    elapsed = time.perf_counter() - t0
    assert sink.spool.records == 0 and sink.sent_points == len(points), sink.stats()
    await sink.aclose()
    return elapsed


async def spool_write(tmp: Path, bodies: list[tuple[bytes, int]], fsync: str) -> float:
    spool = Spool(tmp, max_bytes=1 << 34, fsync=parse_fsync_policy(fsync))
    await spool.open()
    t0 = time.perf_counter()
    for body, n in bodies:
        await spool.append(body, n)  # as the sink does: wait for each record
    elapsed = time.perf_counter() - t0
    await spool.close()
    return elapsed


def plain_write(path: Path, bodies: list[tuple[bytes, int]]) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for body, _ in bodies:
        os.write(fd, body)
    os.close(fd)
    return time.perf_counter() - t0


async def spool_read(tmp: Path) -> tuple[float, int]:
    spool = Spool(tmp, max_bytes=1 << 34)
    await spool.open()
    t0 = time.perf_counter()
    n = 0
    while spool.records:
        batch = await spool.read(4 << 20)
        n += batch.points
        await spool.commit(batch)
    elapsed = time.perf_counter() - t0
    await spool.close()
    return elapsed, n


async def replay_into_server(
    vm: VictoriaMetrics, tmp: Path, run: str, points: list[Point]
) -> float:
    vm.stop()
    config = InfluxDBConfig(url=vm.url, timeout=60.0, retry_initial=0.05, retry_max=0.05)
    sink = InfluxDBSink(config, context(tmp, run))
    await sink.open()
    for i in range(0, len(points), 5000):
        await sink.write(points[i : i + 5000])
    assert sink.spool.points == len(points)
    await sink.aclose()
    vm.start()
    again = InfluxDBSink(config, context(tmp, run))
    t0 = time.perf_counter()
    await again.open()  # recovery (reading and checking every record) is part of replay
    await again.wait_drained()
    elapsed = time.perf_counter() - t0
    assert again.replayed_points == len(points), again.stats()
    await again.aclose()
    return elapsed


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1000:8.1f}k pts/s ({seconds * 1000:7.1f} ms)"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not have("victoria-metrics"):
        sys.exit("victoria-metrics is not installed (apt-get install victoria-metrics)")
    n = args.points
    points = make_points(n)

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        vm = VictoriaMetrics(tmp / "vm")
        vm.start()
        try:
            inf = float("inf")
            best_ceiling = best_encode = best_post = best_sink = inf
            for r in range(args.repeat):
                total, encode, post = await ceiling(vm.url, points, f"c{r}")
                best_ceiling = min(best_ceiling, total)
                best_encode = min(best_encode, encode)
                best_post = min(best_post, post)
                best_sink = min(
                    best_sink, await sink_run(vm.url, tmp / f"s{r}", f"s{r}", points, args.batch)
                )
            print(f"into VictoriaMetrics over loopback, {n:,} points, best of {args.repeat}:")
            print(f"  ceiling: LineEncoder, one body, client direct  {rate(n, best_ceiling)}")
            print(f"  sink:    write() in batches of {args.batch:<6}        {rate(n, best_sink)}")
            print(f"  sink / ceiling: {best_ceiling / best_sink * 100:5.1f} %  (target >= 80 %)")
            print(f"  of which: encoding alone                       {rate(n, best_encode)}")
            print(f"            post of the pre-encoded body alone   {rate(n, best_post)}")
            print(f"  sink / post alone: {best_post / best_sink * 100:5.1f} %")

            enc = LineEncoder({"host": "bench", "run": "spool"})
            bodies = [
                (
                    enc.encode_many(points[i : i + args.batch]).encode(),
                    len(points[i : i + args.batch]),
                )
                for i in range(0, n, args.batch)
            ]
            mb = sum(len(b) for b, _ in bodies) / 1e6
            results: dict[str, float] = {}
            for r in range(args.repeat):
                for fsync in ("always", "never"):
                    t = await spool_write(tmp / f"spool-{fsync}-{r}", bodies, fsync)
                    results[fsync] = min(results.get(fsync, float("inf")), t)
                t = plain_write(tmp / f"plain-{r}.lp", bodies)
                results["plain"] = min(results.get("plain", float("inf")), t)
            print(f"spool append, {n:,} points ({mb:.1f} MB) in records of {args.batch}:")
            print(f"  baseline: os.write to one file     {rate(n, results['plain'])}")
            print(f'  spool, fsync = "never"             {rate(n, results["never"])}')
            print(f'  spool, fsync = "always"            {rate(n, results["always"])}')

            read_best = float("inf")
            for r in range(args.repeat):
                t, got = await spool_read(tmp / f"spool-never-{r}")
                assert got == n
                read_best = min(read_best, t)
            print(
                f"spool replay from disk (read + checksum + commit, no server): {rate(n, read_best)}"
            )
            replay_best = float("inf")
            for r in range(args.repeat):
                t = await replay_into_server(vm, tmp / f"replay{r}", f"r{r}", points)
                replay_best = min(replay_best, t)
            print(
                f"spool replay into VictoriaMetrics after an outage:          {rate(n, replay_best)}"
            )
            print(
                f"  (beside the sink's direct writes above:                     {rate(n, best_sink)})"
            )
            counters = vm.total_counters()
            assert counters == {"vm_rows_invalid_total": 0.0, "vm_rows_ignored_total": 0.0}, (
                counters
            )
        finally:
            vm.stop()


if __name__ == "__main__":
    asyncio.run(main())
