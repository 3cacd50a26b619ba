#!/usr/bin/env bash
# Generates the Python client from a running agent's /openapi.json into a scratch directory and runs
# smoke.py with it (see smoke.py for what it does and the UFO_* variables it reads).
# Usage: UFO_URL=http://127.0.0.1:8080 UFO_TOKEN=... smoke.sh [SCRATCH]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scratch="${1:-$(mktemp -d)}"
command -v openapi-python-client >/dev/null ||
  { echo "no openapi-python-client: python3 -m pip install 'openapi-python-client==0.29.1'" >&2; exit 1; }
"$here/generate.sh" "$UFO_URL/openapi.json" "$scratch/ufo-agent-client"
PYTHONPATH="$scratch/ufo-agent-client" exec python3 "$here/smoke.py"
