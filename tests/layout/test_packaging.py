"""The built wheel carries what an installed nrg reads at run time: the query library beside
``acquisition`` (``report --influx``), the summary's JSON schema, the plugins' samples. It is
built, as the Dockerfile builds the image, from the files the Dockerfile copies (and nothing
left over from an earlier build)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from acquisition.queries import available

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def dockerfile_sources() -> list[str]:
    """What the Dockerfile copies into its build folder before ``pip install``."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    before_install = text[: text.index("RUN pip install")]
    sources: list[str] = []
    for args in re.findall(r"^COPY (.+)$", before_install, re.M):
        sources += args.split()[:-1]
    return sources


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in dockerfile_sources():
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(src)],
        check=True, capture_output=True, timeout=170,
    )  # fmt: skip
    (found,) = out.glob("nrg-*.whl")
    return found


def test_the_wheel_carries_the_run_time_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    library = {n.removeprefix("queries/") for n in names if n.startswith("queries/")}
    expected = {f"{q}.{suffix}" for q in available() for suffix in ("flux", "influxql")}
    assert expected <= library
    assert "acquisition/schemas/summary-1.json" in names
    assert "collectors/procfs/sample.toml" in names and "sinks/file/sample.toml" in names


def test_an_installed_nrg_finds_its_query_library(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True, timeout=170,
    )  # fmt: skip
    code = (
        "from acquisition.queries import available, queries_dir\n"
        "print(queries_dir()); print(len(available()))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    where, count = proc.stdout.split()
    assert Path(where) == target / "queries"
    assert int(count) == len(available())
