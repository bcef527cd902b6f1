#!/usr/bin/env bash
# Checks the alerting rules, their unit tests and the Grafana dashboard
# (docs/observability.md):
#   - telemetry/grafana/holdfast.json is valid JSON; every panel has a title, and every
#     panel but a row has at least one target with an expr;
#   - every alert of telemetry/prometheus/alerts.yml has severity page or ticket, a
#     summary, a description and a runbook_url naming a file of this repository, and
#     appears in at least one test of alerts_test.yml;
#   - promtool: `check rules` on alerts.yml, `test rules` on alerts_test.yml, and
#     `check rules` on the dashboard's queries (as recording rules) so a PromQL typo
#     in a panel fails here rather than in Grafana.
# promtool: on PATH or where scripts/setup.sh unpacks it. Without it the promtool
# checks are skipped with a note, unless CI_REQUIRE_PROMTOOL=1.
set -euo pipefail
cd "$(dirname "$0")/.."

rules=telemetry/prometheus/alerts.yml
tests=telemetry/prometheus/alerts_test.yml
dashboard=telemetry/grafana/holdfast.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$rules" "$tests" "$dashboard" "$work/dashboard_rules.yml" <<'PY'
import json, os, re, sys

rules_path, tests_path, dash_path, dash_rules_path = sys.argv[1:5]
errors = []

# ---- the dashboard
try:
    with open(dash_path) as f:
        dash = json.load(f)
except (OSError, ValueError) as e:
    sys.exit(f"{dash_path}: not valid JSON: {e}")

def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels") or [])

exprs = []
panels = list(walk(dash.get("panels") or []))
if not panels:
    errors.append(f"{dash_path}: no panels")
for p in panels:
    title = (p.get("title") or "").strip()
    where = f"{dash_path}: panel {p.get('id')} ({title or 'no title'})"
    if not title:
        errors.append(f"{where}: no title")
    if p.get("type") == "row":
        continue
    targets = [t for t in p.get("targets") or [] if (t.get("expr") or "").strip()]
    if not targets:
        errors.append(f"{where}: no target with an expr")
    exprs += [(p.get("id"), t.get("refId", "A"), t["expr"]) for t in targets]

# The panels' queries as recording rules, with Grafana's variables given values, for
# promtool to parse.
subst = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
with open(dash_rules_path, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for panel_id, ref, e in exprs:
        for k, v in subst.items():
            e = e.replace(k, v)
        e = re.sub(r"\$\{?(\w+)\}?", ".*", e)  # $ns, ${group}: used in =~ matchers
        # The record's name says which panel (its id) and target (refId) it is.
        f.write(f"      - record: dashboard:panel_{panel_id}_{ref}\n        expr: {json.dumps(e)}\n")

# ---- the alerts (parsed by their layout: one "- alert:" block per rule)
with open(rules_path) as f:
    text = f.read()
blocks = re.split(r"^\s*- alert:\s*", text, flags=re.M)[1:]
if not blocks:
    errors.append(f"{rules_path}: no alerts")
with open(tests_path) as f:
    tested = set(re.findall(r"^\s*alertname:\s*(\S+)\s*$", f.read(), flags=re.M))
for b in blocks:
    name = b.split("\n", 1)[0].strip()
    body = re.split(r"^\s*- (?:name|record):", b, flags=re.M)[0]
    def field(key):
        m = re.search(rf"^\s+{key}:\s*(.*?)\s*$", body, flags=re.M)
        return m.group(1).strip("\"'") if m else None
    sev = field("severity")
    if sev not in ("page", "ticket"):
        errors.append(f"{rules_path}: {name}: severity is {sev!r}, not page or ticket")
    for key in ("summary", "description", "runbook_url"):
        if not field(key):
            errors.append(f"{rules_path}: {name}: no {key}")
    url = field("runbook_url")
    if url:
        path = url.split("#", 1)[0]
        if re.match(r"^[a-z]+://", path) or not os.path.isfile(path):
            errors.append(f"{rules_path}: {name}: runbook_url {url} is not a file of this repository")
    if name not in tested:
        errors.append(f"{tests_path}: no test evaluates {name}")

for e in errors:
    print(e, file=sys.stderr)
if errors:
    sys.exit(1)
rows = sum(1 for p in panels if p.get("type") == "row")
print(f"observability: {len(panels) - rows} dashboard panels in {rows} rows, {len(exprs)} queries; "
      f"{len(blocks)} alerts, each with a severity, a runbook and a test")
PY

promtool=$(command -v promtool || true)
if [ -z "$promtool" ] && [ -x /opt/prometheus/usr/bin/promtool ]; then
  promtool=/opt/prometheus/usr/bin/promtool
fi
if [ -z "$promtool" ]; then
  if [ "${CI_REQUIRE_PROMTOOL:-0}" = 1 ]; then
    echo "observability: promtool is required (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  echo "observability: promtool not found; skipping promtool check/test rules (scripts/setup.sh installs it)"
  exit 0
fi

"$promtool" check rules "$rules"
"$promtool" test rules "$tests"
if ! out=$("$promtool" check rules "$work/dashboard_rules.yml" 2>&1); then
  echo "$out" >&2
  echo "observability: a query of $dashboard does not parse (dashboard:panel_<id>_<refId> above)" >&2
  exit 1
fi
echo "observability: the dashboard's queries parse"
