#!/usr/bin/env python3
"""Checks the Kubernetes objects modules/kubernetes renders (read as the JSON of
`terraform output -json manifests`, on stdin): what a platform team would otherwise
find out on a real cluster. Exits 1 with every finding.

Each StatefulSet (a cell, or a region's registry voter):
  - one rendered config per pod, named <set>-<ordinal>.toml, each a valid TOML whose
    addresses the set's certificate names;
  - a headless Service publishing not-ready pods (Raft peers resolve each other
    before they are ready), a PodDisruptionBudget of maxUnavailable 1, a data volume
    per pod mounted at the config's data_dir, one node per Kubernetes node;
  - a readiness probe (GET /readyz over HTTPS on the metrics port), and a
    termination grace longer than the node's shutdown deadline (5 s).
Each gateway Deployment: readiness on /readyz, the config in its ConfigMap, a Service.
Every pod: no service links (`enableServiceLinks: false`: a Service named `holdfast`
would put HOLDFAST_* variables in its environment).
With EXPECT_OTLP set, every pod's OTEL_EXPORTER_OTLP_ENDPOINT is that collector.
Every address any config or the bootstrap script names is a host some certificate
names (so TLS verification succeeds), and every registry voter and cell node is named.
"""
import json
import os
import sys
import tomllib

SHUTDOWN_DEADLINE_S = 5
findings = []


def check(ok, what):
    if not ok:
        findings.append(what)


def check_otlp(name, container):
    """With EXPECT_OTLP set, every pod exports traces there (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    want = os.environ.get("EXPECT_OTLP")
    if want:
        got = [e.get("value") for e in container.get("env", []) if e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"]
        check(got == [want], f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT is {got}, want [{want!r}]")


def host(addr):
    return addr.rsplit(":", 1)[0]


def main():
    by_region = json.load(sys.stdin)
    objects = [o for objs in by_region.values() for o in objs.values()]
    kinds = {}
    for o in objects:
        kinds.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    certs = kinds.get("Certificate", {})
    named_hosts = {h for c in certs.values() for h in c["spec"]["dnsNames"]}
    check(certs, "no cert-manager Certificate rendered (the check expects cert_manager_issuer set)")
    referenced = set()

    for name, sts in kinds.get("StatefulSet", {}).items():
        spec = sts["spec"]
        pod = spec["template"]["spec"]
        c = pod["containers"][0]
        role = c["args"][0]
        cm = kinds["ConfigMap"].get(f"{name}-config")
        check(cm is not None, f"{name}: no ConfigMap {name}-config")
        keys = sorted(cm["data"]) if cm else []
        want = [f"{name}-{i}.toml" for i in range(spec["replicas"])]
        check(keys == want, f"{name}: configs {keys}, want one per pod {want}")
        check(c["args"][-1] == "/etc/holdfast/config/$(POD_NAME).toml", f"{name}: pods do not read their own config")
        check(any(e["name"] == "POD_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" for e in c["env"]), f"{name}: POD_NAME not from metadata.name")
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        check(spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data" and "data" in mounts, f"{name}: no data volume per pod")
        check(spec["podManagementPolicy"] == "Parallel", f"{name}: pods must start together to form the group")
        check(pod.get("enableServiceLinks") is False, f"{name}: service links on")
        check(pod["terminationGracePeriodSeconds"] > SHUTDOWN_DEADLINE_S, f"{name}: grace {pod['terminationGracePeriodSeconds']} s not above the shutdown deadline")
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        check(anti["topologyKey"] == "kubernetes.io/hostname", f"{name}: two voters may share a machine")
        probe = c["readinessProbe"]
        check(probe.get("httpGet", {}).get("path") == "/readyz" and probe["httpGet"]["scheme"] == "HTTPS", f"{name}: {role} readiness is not GET /readyz over HTTPS")
        check_otlp(name, c)
        svc = kinds["Service"].get(name)
        check(svc is not None and svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"], f"{name}: no headless Service publishing not-ready pods")
        pdb = kinds["PodDisruptionBudget"].get(name)
        check(pdb is not None and pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"], f"{name}: no PodDisruptionBudget of one")
        cert = certs.get(name)
        check(cert is not None and f"holdfast://node/{name}" in cert["spec"]["uris"], f"{name}: no Certificate naming holdfast://node/{name}")
        for key in keys:
            cfg = tomllib.loads(cm["data"][key])
            check(cfg["data_dir"].startswith(mounts.get("data", "?") + "/"), f"{name}/{key}: data_dir {cfg['data_dir']} is not on the data volume")
            check(cfg["tls"].get("certs_dir") == mounts.get("certs"), f"{name}/{key}: certs_dir is not the mounted secret")
            adv = cfg.get("advertise_client_addr")
            check(adv and cert and host(adv) in cert["spec"]["dnsNames"], f"{name}/{key}: advertised address {adv} not in its certificate")
            referenced.update(host(e) for e in cfg.get("registry_endpoints", "").split(",") if e)
            check(cfg["client_addr"].startswith("0.0.0.0:"), f"{name}/{key}: does not listen on every interface")

    for name, dep in kinds.get("Deployment", {}).items():
        c = dep["spec"]["template"]["spec"]["containers"][0]
        check(dep["spec"]["template"]["spec"].get("enableServiceLinks") is False, f"{name}: service links on")
        check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", f"{name}: gateway readiness is not /readyz")
        check_otlp(name, c)
        cm = kinds["ConfigMap"].get(f"{name}-config")
        check(cm is not None and "gateway.toml" in cm["data"], f"{name}: no gateway.toml")
        if cm:
            cfg = tomllib.loads(cm["data"]["gateway.toml"])
            referenced.update(host(e) for e in cfg["registry_endpoints"].split(","))
        check(name in kinds["Service"], f"{name}: no Service")
        check(name in kinds["PodDisruptionBudget"], f"{name}: no PodDisruptionBudget")

    check(referenced, "no config names the registry")
    for h in sorted(referenced - named_hosts):
        findings.append(f"{h} is called but no certificate names it")
    # Every region has its registry voter and gateways.
    for region, objs in by_region.items():
        check(f"StatefulSet/registry-{region}" in objs, f"{region}: no registry voter")
        check(f"Deployment/gateway-{region}" in objs, f"{region}: no gateways")

    if findings:
        print("manifests: " + str(len(findings)) + " finding(s):\n  " + "\n  ".join(findings))
        sys.exit(1)
    print(f"manifests: ok ({len(objects)} objects in {len(by_region)} regions)")


main()
