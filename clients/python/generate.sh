#!/usr/bin/env bash
# Generates the Python client of the agent's REST API with openapi-python-client (pinned in .ci/run:
# `python3 -m pip install 'openapi-python-client==0.29.1'`) from the agent's OpenAPI document.
# Usage: generate.sh [SOURCE [OUTPUT]]; SOURCE is a URL or a file (default: the local agent's
# http://127.0.0.1:8080/openapi.json); OUTPUT (default clients/python/ufo-agent-client) is a project with a
# pyproject.toml: `pip install OUTPUT`, or put it on PYTHONPATH, then `import ufo_agent_client`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source="${1:-http://127.0.0.1:8080/openapi.json}"
output="${2:-$here/ufo-agent-client}"
case "$source" in
  http://* | https://*) from=(--url "$source") ;;
  *) from=(--path "$source") ;;
esac
openapi-python-client generate "${from[@]}" --config "$here/config.yaml" --output-path "$output" \
  --overwrite --fail-on-warning
