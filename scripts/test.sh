#!/usr/bin/env bash
# Install everything the tests need, then lint, type-check and run the whole test suite.
# Used verbatim by README.md and by CI (.ci/run). Idempotent: re-running reuses .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: the real database servers the tests start on 127.0.0.1 (nothing starts by
# itself), Chromium for the HTML report test, docker-compose to validate the compose file, and
# Node.js for the Flux and Grafana-schema checkers, tmux for the live-line test.
need=()
command -v victoria-metrics >/dev/null || need+=(victoria-metrics)
command -v influxd >/dev/null || need+=(influxdb)
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v node >/dev/null || need+=(nodejs npm)
command -v tmux >/dev/null || need+=(tmux)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "note: missing ${need[*]} and not root: the tests that need them will be skipped" >&2
    fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev,docs,report,influx,nvml,serial,torch]'
# Pinned npm tools (Flux language server, Grafana's schema, ajv) for the offline checks.
if command -v npm >/dev/null; then
    npm ci --prefix tools --no-audit --no-fund --silent
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports
# The type check (about 40 s from a cold cache) runs beside the tests; either failing fails.
mypy_log=$(mktemp)
.venv/bin/mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
tests=0
.venv/bin/pytest "$@" || tests=$?
types=0
wait "$mypy_pid" || types=$?
cat "$mypy_log"
[ "$types" = 0 ] || echo "mypy failed (exit $types)" >&2
exit $((tests != 0 ? tests : types))
