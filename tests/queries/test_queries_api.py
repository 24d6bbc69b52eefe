"""acquisition.queries: loading, filling in placeholders, and picking the dialect from /ping."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition import queries
from acquisition.queries import (
    ALL,
    MSG_BAD_DIALECT,
    MSG_LIST_IN_STRING,
    MSG_MISSING_PARAM,
    QueryError,
    describe,
    load_query,
    render,
    server_dialect,
)
from acquisition.report.cli import compare_main, report_main
from acquisition.report.flux import INFLUX_NEEDS_ORG
from acquisition.report.influx_target import ENV_ORG
from tests.servers import Influxd, free_port, have

T = {"timeRangeStart": 1_767_225_600_000_000_000, "timeRangeStop": 1_767_225_660_000_000_000}


def test_load_query_reads_the_library_file() -> None:
    text = load_query("run_summary", "influxql")
    assert text.startswith("-- Run summary")
    assert describe(text).startswith("Run summary")
    assert describe(load_query("run_summary", "flux")) == describe(text)


def test_unknown_query_names_the_known_ones() -> None:
    with pytest.raises(QueryError, match="run_summary"):
        load_query("no_such_question", "flux")


def test_bad_dialect_and_name_are_refused() -> None:
    with pytest.raises(QueryError) as e:
        load_query("run_summary", "sql")
    assert str(e.value) == MSG_BAD_DIALECT.format(dialect="sql")
    with pytest.raises(QueryError, match="invalid query name"):
        load_query("../pyproject", "flux")


def test_library_elsewhere_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(queries.ENV_QUERIES_DIR, str(tmp_path))
    (tmp_path / "mine.influxql").write_text("-- Mine.\nSELECT 1\n")
    assert load_query("mine", "influxql") == "-- Mine.\nSELECT 1\n"
    monkeypatch.setenv(queries.ENV_QUERIES_DIR, str(tmp_path / "absent"))
    with pytest.raises(QueryError, match="NRG_QUERIES_DIR"):
        load_query("mine", "influxql")


def test_render_influxql_time_filter_interval_and_quoting() -> None:
    q = "SELECT mean(x) FROM m WHERE e = '$experiment' AND h =~ /^$host$/ AND $timeFilter GROUP BY time($__interval)"
    out = render(q, {**T, "experiment": "it's", "host": ["a.b", "c"], "windowPeriod": "30s"})
    assert out == (
        "SELECT mean(x) FROM m WHERE e = 'it\\'s' AND h =~ /^(a\\.b|c)$/ AND "
        "time >= '2026-01-01T00:00:00.000000000Z' AND time <= '2026-01-01T00:01:00.000000000Z' "
        "GROUP BY time(30s)"
    )


def test_render_flux_defines_grafanas_v_record_after_the_imports() -> None:
    q = 'import "strings"\nfrom(bucket: v.defaultBucket) |> filter(fn: (r) => r.run == "${run}")'
    start = datetime(2026, 1, 1, tzinfo=UTC)
    out = render(q, {"timeRangeStart": start, "timeRangeStop": T["timeRangeStop"], "run": 'r"1'})
    lines = out.splitlines()
    assert lines[0] == 'import "strings"'
    assert lines[1].startswith("v = {timeRangeStart: 2026-01-01T00:00:00.000000Z, ")
    assert 'defaultBucket: "nrg"' in lines[1]
    assert lines[2].endswith('r.run == "r\\"1")')


def test_all_matches_everything_and_a_filled_value_is_never_read_again() -> None:
    out = render("x =~ /^$host$/ AND y = '$run'", {"host": ALL, "run": "$host"}, dialect="influxql")
    assert out == "x =~ /^.*$/ AND y = '$host'"


def test_missing_parameter_and_list_in_a_string_are_errors() -> None:
    with pytest.raises(QueryError) as e:
        render("SELECT 1 WHERE r = '$run'", {"experiment": "e"})
    assert str(e.value) == MSG_MISSING_PARAM.format(name="run", given="experiment")
    with pytest.raises(QueryError) as e:
        render("SELECT 1 WHERE r = '$run'", {"run": ["a", "b"]})
    assert str(e.value) == MSG_LIST_IN_STRING.format(name="run")


# ALL ("*", as Grafana's custom all value) means every value: a value list holding it is tested
# by the ALL test; here every other text.
_VALUE = st.text(min_size=1, max_size=12).filter(lambda v: v != ALL)


@given(st.lists(_VALUE, min_size=1, max_size=4), st.text(max_size=12))
def test_regex_slot_matches_exactly_the_given_values(values: list[str], other: str) -> None:
    out = render("/^$v$/", {"v": values}, dialect="influxql")
    pattern = out[1:-1].replace("\\/", "/")
    for value in values:
        assert re.fullmatch(pattern, value, flags=re.DOTALL)
    assert bool(re.fullmatch(pattern, other, flags=re.DOTALL)) == (other in values)


class _Ping(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 204 and ``X-Influxdb-Version: version`` (when set); keeps the
    paths asked for."""

    version = ""
    paths: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.paths.append(self.path.split("?")[0])
        self.send_response(204)
        if self.version:
            self.send_header("X-Influxdb-Version", self.version)
        self.end_headers()


@pytest.fixture
def pinger() -> Iterator[tuple[str, type[_Ping]]]:
    handler = type("Handler", (_Ping,), {"paths": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("version", "dialect"),
    [
        ("v2.7.10", "flux"),
        ("2.0.0", "flux"),
        ("cloud2", "flux"),
        ("1.8.10", "influxql"),
        ("3.0.1", "influxql"),
    ],
)
def test_dialect_from_the_version_header(
    pinger: tuple[str, type[_Ping]], version: str, dialect: str
) -> None:
    url, handler = pinger
    handler.version = version
    assert server_dialect(url + "/") == dialect


def test_no_version_header_is_an_error_that_says_what_to_do(
    pinger: tuple[str, type[_Ping]],
) -> None:
    url, _ = pinger
    with pytest.raises(QueryError, match="pass the dialect explicitly"):
        server_dialect(url)


@pytest.mark.parametrize("main", [report_main, compare_main])
def test_report_from_a_flux_server_reads_with_flux_and_needs_the_org(
    pinger: tuple[str, type[_Ping]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    main: Any,
) -> None:
    url, handler = pinger
    handler.version = "v2.7.11"
    monkeypatch.delenv(ENV_ORG, raising=False)
    assert main(["--influx", f"{url}/nrg", "a", "--format", "json"]) == 2
    expected = INFLUX_NEEDS_ORG.format(url=url, setting=ENV_ORG)
    assert capsys.readouterr().err == f"nrg-collect: {expected}\n"
    assert handler.paths == ["/ping"]  # no InfluxQL sent to a Flux server


def test_report_from_an_influxql_server_goes_on_to_query(
    pinger: tuple[str, type[_Ping]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = pinger
    handler.version = "1.8.10"
    assert report_main(["--influx", f"{url}/nrg", "--list"]) == 0  # a database without runs
    assert capsys.readouterr().err == ""
    assert handler.paths[0] == "/ping" and "/query" in handler.paths


def test_unreachable_server_is_an_error() -> None:
    with pytest.raises(QueryError, match="cannot ask"):
        server_dialect(f"http://127.0.0.1:{free_port()}", timeout=2)


@pytest.mark.server
def test_influxd_1_6_speaks_influxql(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    server = Influxd(tmp_path_factory.mktemp("influxd-ping"))
    try:
        server.start()
        assert server_dialect(server.url) == "influxql"
    finally:
        server.stop()
