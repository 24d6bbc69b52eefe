"""``report --influx`` against a real influxd 1.6 (Debian) loaded with runs of known power: the
same summaries as from the files holding the same points."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.lineproto import LineEncoder
from acquisition.report.cli import compare_main, report_main
from tests.answers.runs import NS, T0, KnownRun
from tests.servers import Influxd, have

pytestmark = pytest.mark.skipif(not have("influxd"), reason="influxd (Debian influxdb) not here")


@pytest.fixture(scope="module")
def influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Influxd]:
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def load(server: Influxd, db: str, text: str) -> None:
    server.query(f'CREATE DATABASE "{db}"')
    params = urllib.parse.urlencode(
        {"db": db, "precision": "ns", "u": server.admin_user, "p": server.admin_password}
    )
    req = urllib.request.Request(f"{server.url}/write?{params}", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204


def test_report_and_compare_from_influxd(
    influxd: Influxd,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = [KnownRun(run="a", wall_w=70.0), KnownRun(run="b", package_w=40.0, t0=T0 + 100 * NS)]
    text = "".join(LineEncoder().encode_many(r.points()) for r in runs)
    load(influxd, "nrg", text)
    files = tmp_path / "files"
    files.mkdir()
    (files / "nrg.lp").write_text(text)
    monkeypatch.setenv("NRG_INFLUX_USER", influxd.admin_user)
    monkeypatch.setenv("NRG_INFLUX_PASSWORD", influxd.admin_password)
    url = f"{influxd.url}/nrg"

    for run in ("a", "b"):
        assert report_main(["--influx", url, run, "--format", "json"]) == 0
        from_db = json.loads(capsys.readouterr().out)
        assert report_main(["--data", str(files), run, "--format", "json"]) == 0
        from_files = json.loads(capsys.readouterr().out)
        assert from_db["energy"]["total_j"] == pytest.approx(
            from_files["energy"]["total_j"], rel=1e-9
        )
        assert from_db["steps"]["count"] == from_files["steps"]["count"]
        assert from_db["steps"]["samples"] == from_files["steps"]["samples"]
        assert from_db["steps"]["energy_j"] == pytest.approx(from_files["steps"]["energy_j"])
        assert [e["energy_j"] for e in from_db["epochs"]] == pytest.approx(
            [e["energy_j"] for e in from_files["epochs"]]
        )
        assert [m["energy_j"] for m in from_db["modules"]] == pytest.approx(
            [m["energy_j"] for m in from_files["modules"]]
        )
    b = runs[1]
    assert from_db["energy"]["total_j"] == pytest.approx(b.inside_w * b.duration_s, rel=1e-9)

    assert report_main(["--influx", url, "--list"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["a", "b"]
    assert compare_main(["--influx", url, "a", "b", "--format", "json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    energy = next(f for f in cmp["figures"] if f["name"] == "energy")
    assert energy["values"][0]["value"] == pytest.approx(70.0 * runs[0].duration_s, rel=1e-9)


def test_wrong_password_is_said(
    influxd: Influxd, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRG_INFLUX_USER", influxd.admin_user)
    monkeypatch.setenv("NRG_INFLUX_PASSWORD", "wrong")
    assert report_main(["--influx", f"{influxd.url}/nrg", "--list"]) == 2
    assert "answered 401" in capsys.readouterr().err
