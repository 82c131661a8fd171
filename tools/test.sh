#!/usr/bin/env bash
# README command 2: set up (idempotent) and run the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh"
# shellcheck source=/dev/null
. "$ROOT/env.sh"
cd "$ROOT"
# pytest's own exit code: 5 (no tests collected) fails like any other failure.
exec python -m pytest test/ -q -p no:cacheprovider --timeout=300 "$@"
