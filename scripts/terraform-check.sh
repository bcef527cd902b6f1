#!/usr/bin/env bash
# The Terraform checks of CI (docs/deploy.md): formatting of every file; init,
# validate and apply of modules/topology and modules/kubernetes with the three-region
# example's inputs, offline (neither declares a provider); and the rendered
# Kubernetes objects checked (terraform/tests/check_manifests.py). The example root
# itself needs the kubernetes provider, which cannot be fetched here: it is only
# formatted; every object it applies is what modules/kubernetes renders.
# The single-host deployment test (cli/tests/deploy.rs) starts what topology renders.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
tf="${TERRAFORM_BIN:?scripts/setup.sh installs terraform and scripts/env.sh names it}"
work=$(mktemp -d)
# Every pod is rendered exporting traces to this collector (check_manifests.py checks).
otlp=http://otel-collector.observability:4317
trap 'rm -rf "$work"' EXIT
# Terraform's working files go to the scratch dir, never into the repo.
export TF_DATA_DIR="$work/data" TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1

"$tf" fmt -check -recursive -diff terraform
example=$PWD/terraform/examples/three-regions/topology.tfvars.json
for module in topology kubernetes; do
  dir=terraform/modules/$module
  rm -rf "$TF_DATA_DIR"
  "$tf" -chdir="$dir" init -backend=false -no-color >/dev/null
  "$tf" -chdir="$dir" validate -no-color
  extra=()
  [ "$module" = kubernetes ] && extra=(-var image=holdfast:ci -var cert_manager_issuer=holdfast-ca -var "otlp_endpoint=$otlp")
  "$tf" -chdir="$dir" apply -auto-approve -no-color -state="$work/$module.tfstate" -var-file="$example" "${extra[@]}" >/dev/null
  echo "terraform: $module applied"
done
"$tf" -chdir=terraform/modules/kubernetes output -no-color -state="$work/kubernetes.tfstate" -json manifests | EXPECT_OTLP="$otlp" python3 terraform/tests/check_manifests.py

# The VM units (terraform/systemd): `systemd-analyze verify` must have nothing to say
# (an option in the wrong section is only a warning there, so any output fails), with
# ExecStart's binary pointed at one that exists; the sysusers.d entry must parse.
units="$work/units"
mkdir -p "$units"
for unit in terraform/systemd/*.service; do
  sed 's#^ExecStart=/usr/local/bin/holdfast #ExecStart=/bin/true #' "$unit" > "$units/$(basename "$unit")"
done
said=$(cd "$units" && systemd-analyze verify ./*.service 2>&1) || { echo "$said"; echo "systemd: verify failed" >&2; exit 1; }
if [ -n "$said" ]; then
  echo "$said"
  echo "systemd: verify has something to say about the units" >&2
  exit 1
fi
said=$(systemd-sysusers --dry-run "$PWD/terraform/systemd/holdfast.conf" 2>&1) || { echo "$said"; echo "systemd: the sysusers.d entry does not parse" >&2; exit 1; }
echo "systemd: $(ls terraform/systemd/*.service | wc -l) units verified, the sysusers.d entry parsed"
