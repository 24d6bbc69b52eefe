"""Carbon intensity by place: the packaged table by country and cloud region, the settings'
one-line errors, and a live intensity service (a stand-in HTTP server on 127.0.0.1 answering as
Electricity Maps does, refusing the token, or too slow), with the table as the fallback."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import logging
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from acquisition.carbon import (
    TABLE_PATH,
    IntensityService,
    carbon_table,
    parse_intensity_argument,
    resolve_intensity,
)
from acquisition.config import load_config, parse_config
from acquisition.errors import ConfigError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.report.cli import compare_main, report_main, summary_options
from acquisition.run_plan import prepare_run
from acquisition.summary import SummaryOptions, summarize

TABLE = tomllib.loads(TABLE_PATH.read_text())
KEY = "[report] carbon_intensity"


def test_every_country_has_its_figure_year_and_a_source() -> None:
    table = carbon_table()
    assert table["source"]["licence"] == "CC BY 4.0" and table["source"]["url"].startswith("https")
    for code, entry in table["countries"].items():
        assert len(code) == 2 and code.isupper()
        assert 0 < entry["g_per_kwh"] < 1200 and entry["year"] >= 2020 and entry["name"]
    for cloud, regions in table["clouds"].items():
        for region, code in regions.items():
            assert code in table["countries"], f"{cloud} {region} -> {code}"


@pytest.mark.parametrize("code", ["DE", "FR", "IN", "se"])
def test_a_country_gives_the_tables_figure(code: str) -> None:
    figure = resolve_intensity(code, KEY)
    assert figure is not None
    entry = TABLE["countries"][code.upper()]
    assert figure.g_per_kwh == entry["g_per_kwh"]
    assert entry["name"] in figure.source and str(entry["year"]) in figure.source


@pytest.mark.parametrize(
    ("cloud", "region", "code"),
    [("aws", "eu-west-1", "IE"), ("gcp", "europe-west1", "BE"), ("azure", "francecentral", "FR"),
     ("AWS", "EU-CENTRAL-1", "DE")],
)  # fmt: skip
def test_a_cloud_region_gives_its_countrys_figure(cloud: str, region: str, code: str) -> None:
    figure = resolve_intensity({"cloud": cloud, "region": region}, KEY)
    assert figure is not None and figure.zone == code
    assert figure.g_per_kwh == TABLE["countries"][code]["g_per_kwh"]
    assert figure.source.startswith(f"{cloud} {region} -> ")


def test_a_number_and_unset() -> None:
    figure = resolve_intensity(123.5, KEY)
    assert figure is not None and figure.g_per_kwh == 123.5 and KEY in figure.source
    assert resolve_intensity("", KEY) is None


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('carbon_intensity = "XX"', "no figure for country 'XX'"),
        ('carbon_intensity = {cloud = "aws", region = "mars-1"}', "no grid known for aws region"),
        ('carbon_intensity = {cloud = "ibm", region = "x"}', "unknown cloud 'ibm'"),
        ("carbon_intensity = true", "expected a number"),
        ("carbon_intensity = -3", "expected a number"),
        ('carbon_intensity = {region = "eu-west-1"}', "expected a number"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(
    tmp_path: Path, toml: str, says: str
) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(f"[report]\n{toml}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert message.startswith(KEY + ": ") and says in message and "\n" not in message


def test_the_command_line_takes_a_number_or_a_country() -> None:
    assert parse_intensity_argument("250") == 250.0
    assert parse_intensity_argument("fr") == "FR"
    with pytest.raises(argparse.ArgumentTypeError, match="'ZZ'"):
        parse_intensity_argument("ZZ")


def test_summary_options_say_where_the_figure_came_from(tmp_path: Path) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text('[report]\ncarbon_intensity = {cloud = "gcp", region = "europe-north1"}\n')
    options = summary_options(argparse.Namespace(config=str(cfg)))
    assert options.carbon_intensity_g_per_kwh == TABLE["countries"]["FI"]["g_per_kwh"]
    assert "Finland" in options.carbon_intensity_source
    given = summary_options(argparse.Namespace(config=str(cfg), carbon_intensity="DE"))
    assert given.carbon_intensity_g_per_kwh == TABLE["countries"]["DE"]["g_per_kwh"]


# -- the live service ------------------------------------------------------------------------


class _Service(BaseHTTPRequestHandler):
    mode = "answer"
    requests: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        type(self).requests.append((self.path, self.headers.get("auth-token")))
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "unauthorized" or self.headers.get("auth-token") != "sekret":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"message": "unauthorized"}')
            return
        zone = self.path.rpartition("zone=")[2]
        body = json.dumps({"zone": zone, "carbonIntensity": 123, "datetime": "2026-01-01T00:00Z"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[tuple[str, type[_Service]]]:
    handler = type("Handler", (_Service,), {"mode": "answer", "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_live_answer_is_used_and_cached(service: tuple[str, type[_Service]]) -> None:
    url, handler = service
    live = IntensityService(url, "sekret", timeout_s=5.0, cache_s=600.0)
    figure = resolve_intensity("DE", KEY, live)
    assert figure is not None and figure.g_per_kwh == 123.0 and "live, zone DE" in figure.source
    assert handler.requests == [("/v3/carbon-intensity/latest?zone=DE", "sekret")]
    again = resolve_intensity({"cloud": "aws", "region": "eu-central-1"}, KEY, live)
    assert again is not None and again.g_per_kwh == 123.0
    assert len(handler.requests) == 1  # the cache answered


@pytest.mark.parametrize("mode", ["unauthorized", "slow"])
def test_no_answer_falls_back_to_the_table_said_once(
    service: tuple[str, type[_Service]], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, handler = service
    handler.mode = mode
    live = IntensityService(url, "sekret", timeout_s=0.2)
    with caplog.at_level(logging.WARNING, logger="acquisition.carbon"):
        first = resolve_intensity("FR", KEY, live)
        second = resolve_intensity("FR", KEY, live)
    assert first is not None and second is not None
    assert first.g_per_kwh == second.g_per_kwh == TABLE["countries"]["FR"]["g_per_kwh"]
    reason = "HTTP 401" if mode == "unauthorized" else "no answer"
    assert reason in first.source and "did not answer" in first.source
    said = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(said) == 1 and url in said[0] and "sekret" not in said[0]
    assert len(handler.requests) == 2  # asked again (nothing cached), said once


def test_a_config_with_a_service_and_its_token_file(
    service: tuple[str, type[_Service]], tmp_path: Path
) -> None:
    url, handler = service
    (tmp_path / "token").write_text("sekret\n")
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f'[report]\ncarbon_intensity = "PL"\ncarbon_service_url = "{url}"\n'
        f'carbon_service_token_file = "{tmp_path / "token"}"\n'
    )
    options = summary_options(argparse.Namespace(config=str(cfg)))
    assert options.carbon_intensity_g_per_kwh == 123.0
    assert handler.requests[0][1] == "sekret"


# -- what summaries, report and compare say ---------------------------------------------------


def _run_points(run: str, zone: str, g: float, watts: float = 100.0) -> list[Point]:
    """A run of 10 s at ``watts`` (RAPL package), which recorded ``g`` g/kWh for ``zone``."""
    tags = {"experiment": "carbon", "run": run, "host": "h"}
    s = 1_000_000_000
    t0 = 1_767_225_600 * s + (0 if run == "a" else 3600 * s)
    points = [
        Point("nrg_run", tags, {"event": "start"}, t0),
        Point("nrg_carbon", tags, {"g_per_kwh": g, "source": f"table, {zone}"}, t0),
        Point("nrg_run", tags, {"event": "end"}, t0 + 10 * s),
    ]
    points += [
        Point(
            "rapl",
            {**tags, "socket": "0", "domain": "package"},
            {"energy_joules": watts * i, "power_watts": watts},
            t0 + i * s,
        )
        for i in range(-1, 12)
    ]
    return points


def test_each_run_keeps_the_figure_it_recorded_unless_one_is_given() -> None:
    a = summarize(_run_points("a", "FR", 56.0), SummaryOptions())
    assert a.carbon_intensity_g_per_kwh == 56.0
    assert a.carbon_intensity_source == "table, FR (recorded with the run)"
    assert a.co2e_g == pytest.approx(1000.0 / 3.6e6 * 56.0)
    given = SummaryOptions(
        carbon_intensity_g_per_kwh=200.0, carbon_intensity_source="x", carbon_given=True
    )
    assert summarize(_run_points("a", "FR", 56.0), given).co2e_g == pytest.approx(
        1000.0 / 3.6e6 * 200.0
    )
    assert "Carbon intensity: table, FR (recorded with the run)" in str(a)


def test_report_and_compare_say_each_runs_figure_and_recompute_at_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lines = LineEncoder().encode_many(_run_points("a", "FR", 56.0) + _run_points("b", "PL", 662.0))
    (data / "runs.lp").write_text(lines)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert compare_main(["--data", str(data), "a", "b", "--format", "json"]) == 0
    cmp = json.loads(out.getvalue())
    co2e = next(f for f in cmp["figures"] if f["name"] == "CO2e")
    intensity = next(f for f in cmp["figures"] if f["name"] == "carbon intensity")
    assert [v["value"] for v in intensity["values"]] == [56.0, 662.0]
    assert co2e["values"][1]["value"] / co2e["values"][0]["value"] == pytest.approx(662 / 56)
    assert cmp["carbon_sources"] == [
        ["table, FR (recorded with the run)"],
        ["table, PL (recorded with the run)"],
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        argv = ["--data", str(data), "a", "b", "--carbon-intensity", "DE", "--format", "json"]
        assert compare_main(argv) == 0
    cmp = json.loads(out.getvalue())
    intensity = next(f for f in cmp["figures"] if f["name"] == "carbon intensity")
    de = TABLE["countries"]["DE"]["g_per_kwh"]
    assert [v["value"] for v in intensity["values"]] == [de, de]
    assert all("Germany (DE)" in s[0] for s in cmp["carbon_sources"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert compare_main(["--data", str(data), "a", "b"]) == 0
    assert "carbon intensity of a: table, FR (recorded with the run)" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report_main(["--data", str(data), "b"]) == 0
    assert "Carbon intensity: table, PL (recorded with the run)" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report_main(["--data", str(data), "a", "b", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["run"], r["carbon_intensity_g_per_kwh"]) for r in rows] == [
        ("a", "56.0"),
        ("b", "662.0"),
    ]
    assert rows[0]["carbon_intensity_source"] == "table, FR (recorded with the run)"


def test_the_agent_records_the_figure_it_starts_with() -> None:
    config = parse_config('[report]\ncarbon_intensity = {cloud = "azure", region = "norwayeast"}\n')
    args = argparse.Namespace(epochs=None, steps_per_epoch=None, carbon_intensity=None)
    (spec,) = [s for s in prepare_run(config, args).processors if s.name == "carbon"]
    assert spec.options["g_per_kwh"] == TABLE["countries"]["NO"]["g_per_kwh"]
    assert spec.options["source"].startswith("azure norwayeast -> Norway (NO)")
    config = parse_config("[[processors.carbon]]\n")
    given = argparse.Namespace(epochs=None, steps_per_epoch=None, carbon_intensity=123.0)
    (spec,) = [s for s in prepare_run(config, given).processors if s.name == "carbon"]
    assert spec.options == {"g_per_kwh": 123.0, "source": "--carbon-intensity = 123 g/kWh"}
