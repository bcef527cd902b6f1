#!/usr/bin/env bash
# The whole suite (scripts/test.sh, what CI runs, but for the mutants: they run the
# same tests again) beside stress-ng, once: what breaks when the machine is busy and
# its disk slow. Not part of CI; figures in
# docs/development.md ("The suite under stress").
#
#   scripts/stress.sh                  # stress-ng: 1 CPU hog, 1 sync-I/O hog, 1 disk writer
#   STRESS="--cpu 2 --hdd 2" scripts/stress.sh
#
# stress-ng comes from Debian (installed here if missing). Writes
# bench/results/stress-<UTC time>/{summary.txt,test.log,stress-ng.log}; exits with
# the suite's status.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if ! command -v stress-ng >/dev/null; then
  echo "stress: installing stress-ng"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq stress-ng >/dev/null
fi
out="bench/results/stress-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
stress=${STRESS:---cpu 1 --io 1 --hdd 1 --hdd-bytes 256M}
# The disk writer works where the tests' data directories live.
work=$(mktemp -d)
# shellcheck disable=SC2086
(cd "$work" && exec stress-ng $stress --timeout 0 --metrics-brief) >"$out/stress-ng.log" 2>&1 &
hog=$!
trap 'kill $hog 2>/dev/null; wait $hog 2>/dev/null; rm -rf "$work"' EXIT
sleep 2
started=$(date +%s)
TEST_NO_FAIL_FAST=1 TEST_SKIP_MUTANTS=1 scripts/test.sh >"$out/test.log" 2>&1
status=$?
took=$(( $(date +%s) - started ))
kill -INT $hog 2>/dev/null; wait $hog 2>/dev/null
{
  echo "commit: $(git rev-parse --short HEAD)"
  echo "stress-ng: $stress"
  echo "suite: exit $status after ${took} s"
  echo "test binaries: $(grep -cE '^(ok|FAILED) ' "$out/test.log") ran, $(grep -c '^FAILED ' "$out/test.log") failed"
  grep -E '^test .* FAILED$|panicked at' "$out/test.log" | head -40
} | tee "$out/summary.txt"
exit $status
