#!/usr/bin/env bash
# Creates bench/.venv-peers with the peers of bench/requirements-peers.txt and nrg itself
# (editable), so that every ratio against a peer in bench/RESULTS.md is reproducible.
# Usage: bash bench/make_peers_venv.sh [python]   (default: python3)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${1:-python3}"
"$python" -m venv "$here/.venv-peers"
"$here/.venv-peers/bin/pip" install --quiet --upgrade pip
"$here/.venv-peers/bin/pip" install --quiet -r "$here/requirements-peers.txt"
"$here/.venv-peers/bin/pip" install --quiet -e "$here/.."
echo "peers installed in $here/.venv-peers"
