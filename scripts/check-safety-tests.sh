#!/usr/bin/env bash
# Each safety test must be able to fail: break the guarded code in a scratch copy and
# watch the tests go red. See scripts/check_safety_tests.py for the list of mutants.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
exec python3 scripts/check_safety_tests.py "$@"
