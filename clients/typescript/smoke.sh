#!/usr/bin/env bash
# Generates the TypeScript client from a running agent's /openapi.json into a scratch directory, compiles
# src/smoke.ts against it with tsc (strict), and runs it (see src/smoke.ts for what it does and the
# UFO_* variables it reads). Usage: UFO_URL=http://127.0.0.1:8080 UFO_TOKEN=... smoke.sh [SCRATCH]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scratch="${1:-$(mktemp -d)}"
[ -x "$here/node_modules/.bin/tsc" ] || { echo "no node_modules: run 'npm ci' in $here first" >&2; exit 1; }
mkdir -p "$scratch/src"
cp "$here/package.json" "$here/tsconfig.json" "$scratch/"
cp "$here/src/smoke.ts" "$scratch/src/"
ln -sfn "$here/node_modules" "$scratch/node_modules"
"$here/generate.sh" "$UFO_URL/openapi.json" "$scratch/src/schema.d.ts"
"$here/node_modules/.bin/tsc" -p "$scratch/tsconfig.json"
exec node "$scratch/dist/smoke.js"
