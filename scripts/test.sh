#!/usr/bin/env bash
# Install everything the tests need, then lint, type-check and run the whole test suite.
# Used verbatim by README.md and by CI (.ci/run). Idempotent: re-running reuses .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real database servers the tests start on 127.0.0.1 (Debian packages; nothing starts by itself).
if ! command -v victoria-metrics >/dev/null || ! command -v influxd >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends victoria-metrics influxdb >/dev/null
    else
        echo "note: victoria-metrics/influxd missing and not root: server tests will be skipped" >&2
    fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev,influx,nvml,serial,torch]'

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
.venv/bin/pytest "$@"
