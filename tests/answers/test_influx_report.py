"""``report --influx`` against a real influxd 1.6 (Debian) loaded with runs of known power: the
same summaries as from the files holding the same points."""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.lineproto import LineEncoder
from acquisition.queries import ENV_QUERIES_DIR, queries_dir
from acquisition.report.cli import compare_main, report_main
from acquisition.report.influx_target import INFLUX_NEEDS_CONFIG, INFLUX_NO_SINK
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


@pytest.fixture(scope="module")
def loaded(influxd: Influxd, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Database ``lib`` and the files holding the same two runs."""
    runs = [KnownRun(run="a", wall_w=70.0), KnownRun(run="b", package_w=40.0, t0=T0 + 100 * NS)]
    text = "".join(LineEncoder().encode_many(r.points()) for r in runs)
    load(influxd, "lib", text)
    files = tmp_path_factory.mktemp("lib-files")
    (files / "nrg.lp").write_text(text)
    return "lib", files


def test_the_query_text_comes_from_the_library_folder(
    influxd: Influxd,
    loaded: tuple[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NRG_INFLUX_USER", influxd.admin_user)
    monkeypatch.setenv("NRG_INFLUX_PASSWORD", influxd.admin_password)
    library = tmp_path / "queries"
    shutil.copytree(queries_dir(), library)
    monkeypatch.setenv(ENV_QUERIES_DIR, str(library))
    url = f"{influxd.url}/{loaded[0]}"
    assert report_main(["--influx", url, "--list"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["a", "b"]
    points = library / "points.influxql"
    points.write_text(points.read_text().replace("WHERE", "WHERE \"run\" = 'b' AND"))
    assert report_main(["--influx", url, "--list"]) == 0  # --list reads with `points`
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["b"]
    points.write_text("-- Broken.\nSELECT nothing FROM WHERE\n")
    assert report_main(["--influx", url, "--list"]) == 2
    assert "error parsing query" in capsys.readouterr().err


def sink_config(path: Path, influxd: Influxd, db: str, password: str) -> Path:
    path.write_text(
        '[[sinks.file]]\ndir = "/nonexistent"\n\n'
        f'[[sinks.influxdb]]\nurl = "{influxd.url}"\napi = "v1"\ndatabase = "{db}"\n'
        f'username = "{influxd.admin_user}"\npassword = "{password}"\n'
    )
    return path


def test_influx_without_url_reads_the_configs_influxdb_sink(
    influxd: Influxd,
    loaded: tuple[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NRG_INFLUX_USER", raising=False)
    monkeypatch.delenv("NRG_INFLUX_PASSWORD", raising=False)
    monkeypatch.setenv("MY_INFLUX_PASSWORD", influxd.admin_password)
    config = sink_config(tmp_path / "nrg.toml", influxd, loaded[0], "${MY_INFLUX_PASSWORD}")
    assert report_main(["-c", str(config), "--influx", "b", "--format", "json"]) == 0
    from_db = json.loads(capsys.readouterr().out)
    assert report_main(["--data", str(loaded[1]), "b", "--format", "json"]) == 0
    assert from_db == json.loads(capsys.readouterr().out)

    monkeypatch.setenv("MY_INFLUX_PASSWORD", "not-the-password")
    assert report_main(["--influx", "-c", str(config), "--list"]) == 2
    err = capsys.readouterr().err
    assert "answered 401" in err and "not-the-password" not in err
    assert f"set username and password (or password_file) in [[sinks.influxdb]] of {config}" in err

    assert report_main(["--influx", "--list"]) == 2
    assert capsys.readouterr().err == f"nrg-collect: {INFLUX_NEEDS_CONFIG}\n"
    bare = tmp_path / "bare.toml"
    bare.write_text('[[sinks.file]]\ndir = "/nonexistent"\n')
    assert report_main(["-c", str(bare), "--influx", "--list"]) == 2
    assert capsys.readouterr().err == f"nrg-collect: {INFLUX_NO_SINK.format(config=bare)}\n"


def test_unknown_database_is_said(
    influxd: Influxd, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRG_INFLUX_USER", influxd.admin_user)
    monkeypatch.setenv("NRG_INFLUX_PASSWORD", influxd.admin_password)
    assert report_main(["--influx", f"{influxd.url}/nope", "--list"]) == 2
    err = capsys.readouterr().err
    assert "database not found: nope" in err and "the database in the --influx URL's path" in err
