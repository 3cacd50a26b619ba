#!/usr/bin/env bash
# Generates the TypeScript client's types from the agent's OpenAPI document with openapi-typescript (the
# version pinned in package-lock.json; run `npm ci` here first). Calls then go through openapi-fetch:
#   import createClient from "openapi-fetch"; import type { paths } from "./schema.js";
# Usage: generate.sh [SOURCE [OUTPUT]]; SOURCE is a URL or a file (default: the local agent's
# http://127.0.0.1:8080/openapi.json), OUTPUT defaults to src/schema.d.ts.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source="${1:-http://127.0.0.1:8080/openapi.json}"
output="${2:-$here/src/schema.d.ts}"
"$here/node_modules/.bin/openapi-typescript" "$source" --output "$output" --silent
