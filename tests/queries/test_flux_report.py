"""``report``/``compare --influx`` on InfluxDB 2.x (Flux), against :class:`tests.flux_standin.
FluxStandIn`: no InfluxDB 2.x or Flux engine runs here, so the stand-in serves InfluxDB 2.x's
``/ping`` and ``/api/v2/query`` (see its docstring for what that proves and what it does not).

The same runs are written to ``.lp`` files; the report read through Flux must equal the report
from the files, figure for figure, and the points read must be the stored points exactly
(types and nanosecond times). The posted Flux must be the library's, and type-check.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.queries import ENV_QUERIES_DIR
from acquisition.report.cli import compare_main, report_main
from acquisition.report.flux import (
    INFLUX_NEEDS_EXTRA,
    FluxQueryError,
    FluxStore,
    decode_annotated_csv,
    rfc3339_ns,
)
from acquisition.report.influx_target import ENV_ORG, ENV_TOKEN, target_from_url
from acquisition.store import read_points
from tests.answers.runs import NS, T0, KnownRun
from tests.flux_standin import (
    LIBRARY,
    FluxStandIn,
    annotated_csv,
    points_by_line,
    rfc3339nano,
)
from tests.queries.test_flux import check

TOKEN, ORG, BUCKET = "s3cret-token-value", "lab", "nrg"


def untagged(run: KnownRun) -> list[Point]:
    """What an agent that tags no run leaves on the run's host: GPU and process samples, with
    int, float, string and bool fields."""
    out = []
    for i, t in enumerate(range(run.t0, run.last_sample, NS // 4)):
        gpu = {"host": run.host, "gpu": "0", "name": "A100"}
        fields = {
            "memory_used_bytes": 2_000_000_000 + 1_000_003 * i,
            "memory_total_bytes": 80_000_000_000,
            "utilization_ratio": (i % 7) / 7,
            "power_watts": 100.0 + i,
            "energy_joules": 100.0 * i + 0.125,
            "pstate": "P0",
            "throttled": i % 3 == 0,
        }
        out.append(Point("gpu", gpu, fields, t + 7))  # a time no microsecond can hold
        tree = {"host": run.host, "tree": "4242", "scope": "combined"}
        out.append(Point("process", tree, {"rss_bytes": 10**9 + i, "cpu_seconds": 0.5 * i}, t))
    return out


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Point]]:
    runs = [KnownRun(run="a", wall_w=70.0), KnownRun(run="b", package_w=40.0, t0=T0 + 100 * NS)]
    points = [p for r in runs for p in (*r.points(), *untagged(r))]
    files = tmp_path_factory.mktemp("files")
    (files / "nrg.lp").write_text(LineEncoder().encode_many(points))
    return files, read_points(files)


@pytest.fixture
def standin(
    stored: tuple[Path, list[Point]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[FluxStandIn]:
    monkeypatch.setenv(ENV_TOKEN, TOKEN)
    monkeypatch.setenv(ENV_ORG, ORG)
    with FluxStandIn(stored[1], token=TOKEN, org=ORG, bucket=BUCKET) as server:
        yield server
    assert server.errors == []


def as_json(capsys: pytest.CaptureFixture[str], main: Any, argv: list[str]) -> Any:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_report_and_compare_through_flux_equal_the_files(
    standin: FluxStandIn, stored: tuple[Path, list[Point]], capsys: pytest.CaptureFixture[str]
) -> None:
    files, url = str(stored[0]), f"{standin.url}/{BUCKET}"
    for run in ("a", "b"):
        from_flux = as_json(capsys, report_main, ["--influx", url, run, "--format", "json"])
        from_files = as_json(capsys, report_main, ["--data", files, run, "--format", "json"])
        assert from_flux == from_files
        assert from_flux["resources"]["max_gpu_ram"]["system"] is not None  # untagged GPU points
        assert from_flux["resources"]["max_ram"]["combined"]["total_rss"] is not None
    assert as_json(capsys, compare_main, ["--influx", url, "a", "b", "--format", "json"]) == (
        as_json(capsys, compare_main, ["--data", files, "a", "b", "--format", "json"])
    )
    assert report_main(["--influx", url, "--list"]) == 0
    listed = capsys.readouterr().out
    assert report_main(["--data", files, "--list"]) == 0
    assert listed == capsys.readouterr().out
    assert any("r.run ==" in q for q in standin.queries)  # run_points
    assert any("r.run ==" not in q for q in standin.queries)  # points


def test_points_read_through_flux_are_the_stored_points_exactly(
    standin: FluxStandIn, stored: tuple[Path, list[Point]]
) -> None:
    store = FluxStore(target_from_url(f"{standin.url}/{BUCKET}"))
    points = stored[1]
    assert sorted(points_by_line(list(store.points()))) == sorted(points_by_line(points))
    start, end = T0 + 2 * NS + 7, T0 + 3 * NS + 7
    got = list(store.points(["gpu", "rapl"], start_ns=start, end_ns=end, tags={"run": "a"}))
    want = [
        p
        for p in points
        if p.measurement in ("gpu", "rapl")
        and start <= p.time_ns < end
        and p.tags.get("run") == "a"
    ]
    assert want and sorted(points_by_line(got)) == sorted(points_by_line(want))
    assert list(store.points([])) == []


def test_the_posted_flux_is_the_library_query_and_type_checks(
    standin: FluxStandIn, node: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report_main(["--influx", f"{standin.url}/{BUCKET}", "a", "--format", "json"]) == 0
    capsys.readouterr()
    assert len(standin.queries) >= 3  # the list, the run, its untagged points
    items = [{"name": str(i), "query": q} for i, q in enumerate(standin.queries)]
    results = check(node, items, grafana=False)
    assert [n for n, r in results.items() if not r["valid"]] == []


def test_the_query_text_comes_from_the_library_folder(
    standin: FluxStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = tmp_path / "queries"
    shutil.copytree(LIBRARY, library)
    flux = library / "points.flux"
    flux.write_text(flux.read_text().replace("/^$measurement$/", "/^$measurement$/ and true"))
    monkeypatch.setenv(ENV_QUERIES_DIR, str(library))
    assert report_main(["--influx", f"{standin.url}/{BUCKET}", "--list"]) == 2
    assert "answered 400" in capsys.readouterr().err
    assert len(standin.errors) == 1 and "and true" in standin.errors[0]
    standin.errors.clear()


def test_a_rejected_token_names_the_setting_and_hides_the_token(
    standin: FluxStandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_TOKEN, "wrong-token-value")
    assert report_main(["--influx", f"{standin.url}/{BUCKET}", "--list"]) == 2
    err = capsys.readouterr().err
    assert "answered 401" in err and f"set {ENV_TOKEN}" in err
    assert "wrong-token-value" not in err and len(err.strip().splitlines()) == 1


def test_a_rejected_token_from_the_config_names_its_key(
    standin: FluxStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_INFLUX_TOKEN", "wrong-token-value")
    config = tmp_path / "nrg.toml"
    config.write_text(
        f'[[sinks.influxdb]]\nurl = "{standin.url}"\nbucket = "{BUCKET}"\norg = "{ORG}"\n'
        'token = "${MY_INFLUX_TOKEN}"\n'
    )
    assert report_main(["-c", str(config), "--influx", "--list"]) == 2
    err = capsys.readouterr().err
    assert f"set token (or token_file) in [[sinks.influxdb]] of {config}" in err
    assert "wrong-token-value" not in err
    monkeypatch.setenv("MY_INFLUX_TOKEN", TOKEN)
    assert report_main(["-c", str(config), "--influx", "--list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # header and two runs


def test_unknown_bucket_and_org_are_said(
    standin: FluxStandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert report_main(["--influx", f"{standin.url}/nope", "--list"]) == 2
    err = capsys.readouterr().err
    assert "no bucket 'nope'" in err and "the bucket in the --influx URL's path" in err
    monkeypatch.setenv(ENV_ORG, "other")
    assert report_main(["--influx", f"{standin.url}/{BUCKET}", "--list"]) == 2
    assert f"no organization 'other'; fix {ENV_ORG}" in capsys.readouterr().err


def test_without_influxdb_client_the_extra_is_named(
    standin: FluxStandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "influxdb_client.client.influxdb_client", None)
    assert report_main(["--influx", f"{standin.url}/{BUCKET}", "--list"]) == 2
    assert capsys.readouterr().err == f"nrg-collect: {INFLUX_NEEDS_EXTRA}\n"


def test_rfc3339_keeps_every_nanosecond() -> None:
    assert rfc3339_ns("2026-01-01T00:00:00Z") == 1_767_225_600_000_000_000
    assert rfc3339_ns("2026-01-01T00:00:00.000000001Z") == 1_767_225_600_000_000_001
    assert rfc3339_ns("2026-01-01T01:00:00.5+01:00") == 1_767_225_600_500_000_000
    for ns in (0, 1, T0 + 7, T0 + 123_456_789, 2**63 - 2):
        assert rfc3339_ns(rfc3339nano(ns)) == ns
    with pytest.raises(ValueError):
        rfc3339_ns("2026-01-01 00:00:00Z")


def rows(text: str) -> list[list[str]]:
    import csv
    import io

    return list(csv.reader(io.StringIO(text)))


def test_annotated_csv_types_defaults_and_tables() -> None:
    # As InfluxDB 2.x writes it: #datatype, #group, #default, a header, one table per series
    # and field; a new annotation block after an empty line when the schema changes.
    text = (
        "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,long,string,string,string\r\n"
        "#group,false,false,true,true,false,false,true,true,true\r\n"
        "#default,_result,,,,,,,,\r\n"
        ",result,table,_start,_stop,_time,_value,_field,_measurement,host\r\n"
        ",,0,2026-01-01T00:00:00Z,2026-01-02T00:00:00Z,2026-01-01T00:00:01.000000007Z,9007199254740993,n,m,h1\r\n"
        "\r\n"
        "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,boolean,string,string,string\r\n"
        "#group,false,false,true,true,false,false,true,true,true\r\n"
        "#default,_result,,,,,,,,\r\n"
        ",result,table,_start,_stop,_time,_value,_field,_measurement,host\r\n"
        ",,1,2026-01-01T00:00:00Z,2026-01-02T00:00:00Z,2026-01-01T00:00:01.000000007Z,true,ok,m,h1\r\n"
        "\r\n"
        "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,string,string,string,string\r\n"
        "#group,false,false,true,true,false,false,true,true,true\r\n"
        "#default,_result,,,,,,,,\r\n"
        ",result,table,_start,_stop,_time,_value,_field,_measurement,host\r\n"
        ',,2,2026-01-01T00:00:00Z,2026-01-02T00:00:00Z,2026-01-01T00:00:01.000000007Z,"a, ""b""",s,m,\r\n'
    )
    t = 1_767_225_601_000_000_007
    assert list(decode_annotated_csv(rows(text))) == [
        ("m", "n", (("host", "h1"),), t, 9_007_199_254_740_993),
        ("m", "ok", (("host", "h1"),), t, True),
        ("m", "s", (), t, 'a, "b"'),
    ]


def test_the_standins_csv_round_trips_through_the_decoder() -> None:
    points = [
        Point("m", {"host": "h"}, {"i": -3, "f": 1e-7, "big": 1e22, "b": False, "s": "x"}, T0 + 1),
        Point("m", {"host": "h", "gpu": "0"}, {"f": 0.1}, T0 + 2),
    ]
    records = list(decode_annotated_csv(rows(annotated_csv(points, T0, T0 + NS))))
    assert len(records) == 6
    got = {(r[0], r[1], r[2], r[3]): r[4] for r in records}
    assert got[("m", "i", (("host", "h"),), T0 + 1)] == -3
    assert got[("m", "big", (("host", "h"),), T0 + 1)] == 1e22
    assert got[("m", "b", (("host", "h"),), T0 + 1)] is False
    assert type(got[("m", "f", (("gpu", "0"), ("host", "h")), T0 + 2)]) is float


def test_an_error_table_is_the_query_failing() -> None:
    text = (
        "#datatype,string,string\r\n#group,true,true\r\n#default,,\r\n,error,reference\r\n"
        ',"engine: unknown field type for value: xyz",\r\n'
    )
    with pytest.raises(FluxQueryError, match="unknown field type"):
        list(decode_annotated_csv(rows(text)))
