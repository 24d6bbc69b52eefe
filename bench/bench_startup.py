"""Start-up of ``nrg-collect``: what every tracked command and every ``--once`` pays.

Measures, as medians of interleaved repetitions (so machine load hits every variant alike):

- ``python -c pass``: the interpreter alone, the baseline;
- ``nrg-collect -q -- true``: a tracked command that does nothing;
- ``nrg-collect --once``: one round of line protocol on stdout;
- first point: from spawning ``nrg-collect -q`` (embedded default, file sink) until the first
  line is in its file.

Run: ``python bench/bench_startup.py [--reps 15]``. Byte-code caching stays on (as in a normal
install): a first untimed round writes the ``.pyc`` files.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NRG = [sys.executable, "-m", "acquisition.cli"]


def _env(work: Path, repo: Path = REPO) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRG_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        PYTHONPATH=str(repo),
        NRG_DATA_DIR=str(work / "data"),
        NRG_STATE_DIR=str(work / "state"),
        NRG_RUNTIME_DIR=str(work / "run"),
        TERM="dumb",
    )
    return env


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        argv,
        env=env,
        cwd=env["NRG_DATA_DIR"],  # not the checkout: ``-m`` puts the cwd first on sys.path
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - t0


def _first_point(env: dict[str, str], work: Path) -> float:
    data = work / "data"
    for old in data.glob("*.lp*"):
        old.unlink()
    t0 = time.perf_counter()
    proc = subprocess.Popen([*NRG, "-q"], env=env, cwd=data, stderr=subprocess.DEVNULL)
    try:
        while True:
            if any(p.stat().st_size > 0 for p in data.glob("*.lp*")):
                return time.perf_counter() - t0
            if proc.poll() is not None:
                raise RuntimeError("the agent exited before writing a point")
            if time.perf_counter() - t0 > 30:
                raise RuntimeError("no point within 30 s")
            time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="CHECKOUT",
        help="also measure the nrg code of another checkout (e.g. an older version)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nrg-bench-") as d:
        work = Path(d)
        env = _env(work)
        (work / "data").mkdir()
        variants: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: _timed([sys.executable, "-c", "pass"], env),
            "nrg-collect -q -- true": lambda: _timed([*NRG, "-q", "--", "true"], env),
            "nrg-collect --once": lambda: _timed([*NRG, "--once"], env),
            "first point after spawn": lambda: _first_point(env, work),
        }
        if args.compare is not None:
            other = _env(work, args.compare.resolve())
            variants.update(
                {
                    f"{name} [{args.compare.name}]": run
                    for name, run in (
                        ("-q -- true", lambda: _timed([*NRG, "-q", "--", "true"], other)),
                        ("--once", lambda: _timed([*NRG, "--once"], other)),
                        ("first point", lambda: _first_point(other, work)),
                    )
                }
            )
        for run in variants.values():  # warm-up: byte-code caches, page cache
            run()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.reps):
            for name, run in variants.items():
                times[name].append(run())
    base = statistics.median(times["python -c pass"])
    print(
        f"# {platform.node()} · {platform.processor() or platform.machine()} · "
        f"{os.cpu_count()} CPUs · Python {platform.python_version()} · "
        f"{time.strftime('%Y-%m-%d', time.gmtime())} · {args.reps} interleaved reps"
    )
    print(f"{'variant':<34} {'median ms':>10} {'min ms':>8} {'× python -c pass':>17}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<34} {median * 1e3:>10.1f} {min(values) * 1e3:>8.1f} {median / base:>17.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
