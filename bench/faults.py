"""Fault-injection trials, long variant: the installed agent at 10 Hz against real servers.

One line per trial with its figures (see ``tests/influxdb/faults.py`` and
``tests/hooks/faults.py`` for what each checks);
a trial that cannot run here (no tmpfs without root, no server binary) prints the reason.
``--scale`` stretches the outages (and the hook socket's garbage, line length and connection
count): 1 is the CI variant (``pytest -m faults``), 120 gives a 10-minute outage.

Run: ``.venv/bin/python bench/faults.py [--scale 12] [--only outage,kill_9_with_a_spool]``
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))  # for tests.*.faults (the trials the tests run)

from tests.hooks.faults import TRIALS as HOOK_TRIALS  # noqa: E402
from tests.influxdb.faults import TRIALS, describe, skip_reason  # noqa: E402

TRIALS = {**TRIALS, **HOOK_TRIALS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=12.0, help="outage length factor")
    parser.add_argument("--only", default="", help="comma-separated trial names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(TRIALS)
    unknown = [n for n in names if n not in TRIALS]
    if unknown:
        parser.error(f"unknown trial(s) {unknown}; known: {', '.join(TRIALS)}")
    print(f"# faults --scale {args.scale:g} on {platform.node()} ({platform.machine()})")
    failed = 0
    for name in names:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"nrg-faults-{name}-") as tmp:
            try:
                figures = TRIALS[name](Path(tmp), args.scale)
            except BaseException as exc:
                reason = skip_reason(exc)
                if reason is None:
                    failed += 1
                    print(f"{name:<38} FAILED: {type(exc).__name__}: {exc}", flush=True)
                else:
                    print(f"{name:<38} skipped: {reason}", flush=True)
                continue
        figures["trial_s"] = round(time.monotonic() - t0, 1)
        print(describe(name, figures), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
