"""Capture real procfs files of this machine into tests/fixtures/procfs/_captured/.

Spawns a small real process tree (python root with two threads; one thread forks ``sleep``, the
main thread forks ``sh`` which forks ``sleep``), then copies ``/proc/stat``, ``/proc/meminfo`` and,
for every process of the tree, ``stat``, ``statm``, ``status``, ``smaps_rollup`` and
``task/<tid>/{stat,children}``. ``build_fixtures.py`` derives the scenarios from these files.

Run once: ``.venv/bin/python -m tests.procfs.capture_procfs``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "procfs" / "_captured"

_ROOT = r"""
import subprocess, threading, time
kids = []
t = threading.Thread(target=lambda: kids.append(subprocess.Popen(["sleep", "30"])))
t.start(); t.join()
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()
kids.append(subprocess.Popen(["sh", "-c", "sleep 30 & wait"]))
print("ready", flush=True)
time.sleep(30)
"""


def _tree(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        for tid in os.listdir(f"/proc/{pid}/task"):
            todo += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return sorted(out)


def _copy(src: str, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(Path(src).read_bytes())


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    root = subprocess.Popen([sys.executable, "-c", _ROOT], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        root.stdout.readline()
        time.sleep(0.2)
        proc = OUT / "proc"
        _copy("/proc/stat", proc / "stat")
        _copy("/proc/meminfo", proc / "meminfo")
        for pid in _tree(root.pid):
            for name in ("stat", "statm", "status", "smaps_rollup"):
                _copy(f"/proc/{pid}/{name}", proc / str(pid) / name)
            for tid in os.listdir(f"/proc/{pid}/task"):
                for name in ("stat", "children"):
                    _copy(f"/proc/{pid}/task/{tid}/{name}", proc / str(pid) / "task" / tid / name)
        print(f"captured {len(_tree(root.pid))} processes under {OUT}")
    finally:
        for pid in reversed(_tree(root.pid)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        root.wait()


if __name__ == "__main__":
    main()
