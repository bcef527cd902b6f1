# Sourced by the scripts: one warm cargo target directory outside the clone, so a
# second clone (or CI run) does not rebuild RocksDB's C++ (10-20 minutes on 2 cores).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/holdfast/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Terraform (scripts/setup.sh installs it there): the Terraform checks and the
# deployment test (cli/tests/deploy.rs) run it.
export TERRAFORM_VENV="${TERRAFORM_VENV:-$HOME/.cache/holdfast/terraform}"
export TERRAFORM_BIN="${TERRAFORM_BIN:-$TERRAFORM_VENV/bin/terraform}"
# openapi-spec-validator (PyPI; scripts/setup.sh installs it there): the HTTP
# clients test (cli/tests/http_clients.rs) validates the gateway's /openapi.json.
export OPENAPI_VENV="${OPENAPI_VENV:-$HOME/.cache/holdfast/openapi}"
export OPENAPI_VALIDATOR="${OPENAPI_VALIDATOR:-$OPENAPI_VENV/bin/openapi-spec-validator}"
