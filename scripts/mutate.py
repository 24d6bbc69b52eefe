"""Mutation run: small deliberate bugs, applied one at a time, each against the tests that
should notice it. A mutant is *killed* when its tests fail; a *survivor* shows a test gap.

    python scripts/mutate.py               # every mutant (scripts/mutants.py, mutants_third.py)
    python scripts/mutate.py --only build  # those whose file or name contains "build"
    python scripts/mutate.py --only "peak is" --only secrets  # either
    python scripts/mutate.py --list
    python scripts/mutate.py --generate --count 60             # a seeded sample (seed printed)
    python scripts/mutate.py --generate --seed 1764234000 --count 60 --list  # the same sample
    python scripts/mutate.py --generate --seed 1795774649 --count 40 --at 4d87d0b  # as drawn then

``--generate`` replaces the hand-written lists by mutants generated with ``ast``
(``scripts/mutgen.py``: comparison, arithmetic and boolean operator swaps, ``not`` removed,
numbers ±1, ``return None``, ``min``/``max``, call statements dropped, ``break``/``continue``,
slice bounds) over the modules the lists cover, ``--count`` of them drawn at random, weighted by
each module's executable lines; ``--seed`` (default: the current time, printed) reproduces a
sample. Each runs the union of the tests the hand-written mutants of its module name.

A sample is drawn from the modules' text, so a change to any of them draws another sample from
the same seed; ``--at COMMIT`` draws it from the modules as they were at that commit (the sample
a run recorded) and applies each mutant to the current files, leaving out, with a line, those
whose code has changed since.

Each mutant replaces one exact snippet (it must occur exactly once in its file) and the file
is restored afterwards, on failure, Ctrl-C and SIGTERM too. The mutated module's cached bytecode is
removed and none is written, so a mutant of the same size within the same second as the
original is never mistaken for it. Prints one line per mutant and the score.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import mutgen  # noqa: E402
from mutants import MUTANTS, Mutant  # noqa: E402
from mutants_third import THIRD  # noqa: E402

ALL = MUTANTS + THIRD

TIMEOUT_S = 300


def _drop_bytecode(path: Path) -> None:
    cached = Path(importlib.util.cache_from_source(str(path)))
    cached.unlink(missing_ok=True)


def _pytest(tests: tuple[str, ...]) -> tuple[int, float, str]:
    """pytest's exit status, seconds and output (stdout and stderr)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - start, ""  # a hang: the tests noticed (never finish)
    output = (proc.stdout + proc.stderr).decode(errors="replace")
    return proc.returncode, time.monotonic() - start, output


def run_one(m: Mutant) -> bool:
    """Apply ``m``, run its tests, restore the file; True when the tests failed (killed)."""
    path = ROOT / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        raise SystemExit(f"{m.name}: snippet found {original.count(m.old)} times in {m.path}")
    try:
        path.write_text(original.replace(m.old, m.new))
        _drop_bytecode(path)
        rc, seconds, _ = _pytest(m.tests)
    finally:
        path.write_text(original)
        _drop_bytecode(path)
    # 3, pytest's internal error, is a failure the mutant caused (a warning turned error as the
    # session closes: the tests passed unmutated, which every run checks first)
    if rc in (2, 4, 5):
        raise SystemExit(f"{m.name}: pytest could not run its tests (exit {rc})")
    killed = rc != 0
    print(f"{'killed ' if killed else 'SURVIVED'} {seconds:5.1f}s  {m.name}: {m.path}", flush=True)
    return killed


def _texts_at(commit: str) -> dict[str, str]:
    """The text of each generated module at ``commit`` (``git show``)."""
    return {
        path: subprocess.run(
            ["git", "show", f"{commit}:{path}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for path in mutgen.MODULES
    }


def _applicable(pool: list[Mutant]) -> list[Mutant]:
    """The mutants whose snippet occurs once in the current file; a line for each other one."""
    kept = []
    for m in pool:
        if (ROOT / m.path).read_text().count(m.old) == 1:
            kept.append(m)
        else:
            print(f"gone     (its code changed since) {m.name}: {m.path}", flush=True)
    return kept


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        help="mutants whose file or name contains this (repeat for several)",
    )
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--generate", action="store_true", help="a generated, seeded sample")
    ap.add_argument("--seed", type=int, help="the sample's seed (default: the time)")
    ap.add_argument("--count", type=int, default=60, help="mutants in the sample (60)")
    ap.add_argument("--at", help="with --generate: the sample drawn at this commit")
    args = ap.parse_args(argv)
    # SIGTERM (and SIGINT in a background job, where it is ignored) ends the run the way
    # Ctrl-C does: through run_one's finally, which restores the mutated file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = args.only or [""]
    pool = ALL
    if args.generate:
        seed = int(time.time()) if args.seed is None else args.seed
        print(f"generated sample: --seed {seed} --count {args.count}", flush=True)
        pool = mutgen.sample(seed, args.count, ALL, _texts_at(args.at) if args.at else None)
        if args.at:  # drawn from older text: the snippets that still occur once
            pool = _applicable(pool)
    chosen = [m for m in pool if any(w in m.path or w in m.name for w in wanted)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}  ({m.why})")
        return 0
    for tests in dict.fromkeys(m.tests for m in chosen):  # each subset passes unmutated
        rc, _, output = _pytest(tests)
        if rc != 0:
            print("\n".join(output.splitlines()[-40:]), file=sys.stderr)
            print(f"{' '.join(tests)} fail without any mutant: fix them first", file=sys.stderr)
            return 2
    survivors = [m for m in chosen if not run_one(m)]
    killed = len(chosen) - len(survivors)
    print(f"\n{killed}/{len(chosen)} killed ({100 * killed / max(len(chosen), 1):.1f} %)")
    for m in survivors:
        print(f"  survivor {m.name}: {m.path} ({m.why})")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
