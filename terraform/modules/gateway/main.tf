# A region's gateways as Kubernetes objects (pure; the caller applies them): a
# ConfigMap with the rendered config, a Deployment (gateways are stateless), a
# Service clients call, and a PodDisruptionBudget.

terraform {
  required_version = ">= 1.0.0"
}

variable "topology" {
  description = "modules/topology's outputs (processes)."
  type        = any
}

variable "region" {
  type = string
}

variable "replicas" {
  type    = number
  default = 2
}

variable "service_type" {
  description = "ClusterIP (services in the cluster call it) or LoadBalancer."
  type        = string
  default     = "ClusterIP"
}

variable "settings" {
  description = "What every pod shares: namespace, image, certs_root, insecure, resources, cert_manager_issuer."
  type        = any
}

variable "termination_grace_seconds" {
  description = "Must exceed the gateway's shutdown_deadline_ms (default 5 s)."
  type        = number
  default     = 30
}

locals {
  name     = "gateway-${var.region}"
  gw       = var.topology.processes[local.name]
  labels   = { "app.kubernetes.io/name" = "holdfast", "app.kubernetes.io/component" = "gateway", "holdfast.dev/set" = local.name, "holdfast.dev/region" = var.region }
  selector = { "holdfast.dev/set" = local.name }
  s        = var.settings
  secret   = "${local.name}-tls"

  cert_volume = [{
    name = "certs"
    secret = {
      secretName  = local.secret
      defaultMode = 256
      items       = [{ key = "ca.crt", path = "ca.crt" }, { key = "tls.crt", path = "node.crt" }, { key = "tls.key", path = "node.key" }]
    }
  }]
  cert_mount = [{ name = "certs", mountPath = local.s.certs_root, readOnly = true }]

  objects = [
    {
      apiVersion = "v1"
      kind       = "ConfigMap"
      metadata   = { name = "${local.name}-config", namespace = local.s.namespace, labels = local.labels }
      data       = { "gateway.toml" = local.gw.config }
    },
    {
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = local.name, namespace = local.s.namespace, labels = local.labels }
      spec = {
        type     = var.service_type
        selector = local.selector
        ports    = [{ name = "grpc", port = local.gw.ports.client, targetPort = "grpc" }, { name = "http", port = local.gw.ports.http, targetPort = "http" }]
      }
    },
    {
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = local.name, namespace = local.s.namespace, labels = local.labels }
      spec = {
        replicas = var.replicas
        selector = { matchLabels = local.selector }
        strategy = { type = "RollingUpdate", rollingUpdate = { maxUnavailable = 0, maxSurge = 1 } }
        template = {
          metadata = { labels = local.labels }
          spec = {
            # No service-link variables: a Service named `holdfast` would give the pod
            # HOLDFAST_PORT and friends (servers warn about and skip those; no need for them).
            enableServiceLinks            = false
            terminationGracePeriodSeconds = var.termination_grace_seconds
            securityContext               = { runAsNonRoot = true, runAsUser = 10001 }
            topologySpreadConstraints     = [{ maxSkew = 1, topologyKey = "topology.kubernetes.io/zone", whenUnsatisfiable = "ScheduleAnyway", labelSelector = { matchLabels = local.selector } }]
            containers = [{
              name  = "holdfast"
              image = local.s.image
              args  = ["gateway", "run", "--config", "/etc/holdfast/config/gateway.toml"]
              env   = [for e in [local.s.otlp_endpoint] : { name = "OTEL_EXPORTER_OTLP_ENDPOINT", value = e } if e != ""]
              ports = [{ name = "grpc", containerPort = local.gw.ports.client }, { name = "http", containerPort = local.gw.ports.http }]
              # Ready once it has listed placement from the registry (and, with TLS,
              # fetched the access policy).
              readinessProbe  = { httpGet = { path = "/readyz", port = "http", scheme = local.s.insecure ? "HTTP" : "HTTPS" }, periodSeconds = 2, failureThreshold = 2 }
              livenessProbe   = { httpGet = { path = "/healthz", port = "http", scheme = local.s.insecure ? "HTTP" : "HTTPS" }, periodSeconds = 10, failureThreshold = 3 }
              resources       = { requests = { cpu = local.s.resources.cpu, memory = local.s.resources.memory }, limits = { memory = local.s.resources.memory_limit } }
              securityContext = { readOnlyRootFilesystem = true, allowPrivilegeEscalation = false }
              volumeMounts    = concat([{ name = "config", mountPath = "/etc/holdfast/config", readOnly = true }], slice(local.cert_mount, 0, local.s.insecure ? 0 : 1))
            }]
            volumes = concat([{ name = "config", configMap = { name = "${local.name}-config" } }], slice(local.cert_volume, 0, local.s.insecure ? 0 : 1))
          }
        }
      }
    },
    {
      apiVersion = "policy/v1"
      kind       = "PodDisruptionBudget"
      metadata   = { name = local.name, namespace = local.s.namespace, labels = local.labels }
      spec       = { maxUnavailable = 1, selector = { matchLabels = local.selector } }
    },
  ]

  certificate = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = local.name, namespace = local.s.namespace, labels = local.labels }
    spec = {
      secretName = local.secret
      commonName = local.name
      dnsNames   = local.gw.cert_hosts
      uris       = ["holdfast://node/${local.name}"]
      usages     = ["server auth", "client auth"]
      privateKey = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      issuerRef  = { name = local.s.cert_manager_issuer, kind = "ClusterIssuer" }
    }
  }
}

output "manifests" {
  description = "The gateways' Kubernetes objects, in apply order."
  value       = concat(local.objects, slice([local.certificate], 0, local.s.cert_manager_issuer != "" && !local.s.insecure ? 1 : 0))
}
