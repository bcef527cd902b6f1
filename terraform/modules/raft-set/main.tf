# The Kubernetes objects of one Raft group member set — a cell's nodes, or one region's
# registry voter — as plain objects (no provider): a ConfigMap with each pod's
# configuration, a headless Service (peers resolve each pod's name before it is
# ready), a StatefulSet with a volume per pod, a PodDisruptionBudget that lets one pod
# go at a time, and optionally a cert-manager Certificate. Used by ../cell and
# ../registry; applied by the caller (examples/three-regions: kubernetes_manifest).

terraform {
  required_version = ">= 1.0.0"
}

variable "name" {
  description = "The StatefulSet (and headless Service) name: a cell's name, or registry-<region>."
  type        = string
}

variable "role" {
  description = "cell or registry: the `holdfast <role> run` subcommand."
  type        = string
}

variable "region" {
  type = string
}

variable "namespace" {
  type = string
}

variable "image" {
  description = "The holdfast container image (terraform/image/Containerfile)."
  type        = string
}

variable "configs" {
  description = "Each pod's rendered configuration, by pod name (<name>-0, <name>-1, ...), from modules/topology."
  type        = map(string)
}

variable "cert_hosts" {
  description = "Every DNS name the set's pods are reached at: the node certificate names them all."
  type        = list(string)
}

variable "ports" {
  description = "client, raft and http (0: no HTTP port; readiness then probes the client port)."
  type        = object({ client = number, raft = number, http = number })
}

variable "data_root" {
  description = "Where the data volume is mounted (modules/topology's data_root)."
  type        = string
}

variable "certs_root" {
  description = "Where the certificate secret is mounted (modules/topology's certs_root, per_process_certs = false)."
  type        = string
}

variable "insecure" {
  description = "No TLS (never in a deployment): probes use plain HTTP and no certificate is mounted."
  type        = bool
  default     = false
}

variable "storage" {
  description = "The data volume of each pod."
  type        = object({ size = string, class = string })
}

variable "resources" {
  description = "Container requests and limits."
  type        = object({ cpu = string, memory = string, memory_limit = string })
}

variable "cert_manager_issuer" {
  description = "A cert-manager ClusterIssuer that signs node certificates with the cluster's CA; empty: the secret <name>-tls is made by the operator (holdfast cert create-node)."
  type        = string
  default     = ""
}

variable "otlp_endpoint" {
  description = "OTLP/gRPC collector for traces (OTEL_EXPORTER_OTLP_ENDPOINT); empty: none."
  type        = string
  default     = ""
}

variable "termination_grace_seconds" {
  description = "Must exceed the node's shutdown_deadline_ms (default 5 s): a stopping leader hands over leadership, then closes RocksDB."
  type        = number
  default     = 30
}

locals {
  labels    = { "app.kubernetes.io/name" = "holdfast", "app.kubernetes.io/component" = var.role, "holdfast.dev/set" = var.name, "holdfast.dev/region" = var.region }
  selector  = { "holdfast.dev/set" = var.name }
  replicas  = length(var.configs)
  scheme    = var.insecure ? "HTTP" : "HTTPS"
  probe_tcp = { tcpSocket = { port = "client" }, periodSeconds = 5, failureThreshold = 3 }
  probe_http = {
    httpGet          = { path = "/readyz", port = "http", scheme = local.scheme }
    periodSeconds    = 2
    failureThreshold = 2
  }
  ports = concat(
    [{ name = "client", containerPort = var.ports.client }, { name = "raft", containerPort = var.ports.raft }],
    slice([{ name = "http", containerPort = var.ports.http }], 0, var.ports.http > 0 ? 1 : 0),
  )
  tls_secret = "${var.name}-tls"

  config_map = {
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata   = { name = "${var.name}-config", namespace = var.namespace, labels = local.labels }
    data       = { for pod, toml in var.configs : "${pod}.toml" => toml }
  }

  service = {
    apiVersion = "v1"
    kind       = "Service"
    metadata   = { name = var.name, namespace = var.namespace, labels = local.labels }
    spec = {
      clusterIP = "None"
      # Raft peers must resolve a pod before it is ready: a follower that is not ready
      # yet still has to receive the leader's entries.
      publishNotReadyAddresses = true
      selector                 = local.selector
      ports                    = [for p in local.ports : { name = p.name, port = p.containerPort, targetPort = p.name }]
    }
  }

  volumes = concat(
    [{ name = "config", configMap = { name = "${var.name}-config" } }],
    slice([{
      name = "certs"
      secret = {
        secretName  = local.tls_secret
        defaultMode = 256 # 0400
        # cert-manager's key names, to the names holdfast reads.
        items = [{ key = "ca.crt", path = "ca.crt" }, { key = "tls.crt", path = "node.crt" }, { key = "tls.key", path = "node.key" }]
      }
    }], 0, var.insecure ? 0 : 1),
  )

  mounts = concat(
    [{ name = "data", mountPath = var.data_root }, { name = "config", mountPath = "/etc/holdfast/config", readOnly = true }],
    slice([{ name = "certs", mountPath = var.certs_root, readOnly = true }], 0, var.insecure ? 0 : 1),
  )

  stateful_set = {
    apiVersion = "apps/v1"
    kind       = "StatefulSet"
    metadata   = { name = var.name, namespace = var.namespace, labels = local.labels }
    spec = {
      serviceName = var.name
      replicas    = local.replicas
      # Every node of a new group must run before it can be formed; order buys nothing.
      podManagementPolicy = "Parallel"
      updateStrategy      = { type = "RollingUpdate" }
      selector            = { matchLabels = local.selector }
      template = {
        metadata = { labels = local.labels }
        spec = {
          # No service-link variables: a Service named `holdfast` would give the pod
          # HOLDFAST_PORT and friends (servers warn about and skip those; no need for them).
          enableServiceLinks            = false
          terminationGracePeriodSeconds = var.termination_grace_seconds
          securityContext               = { runAsNonRoot = true, runAsUser = 10001, fsGroup = 10001 }
          affinity = {
            # One node of a group per Kubernetes node: losing a machine costs a group at
            # most one voter.
            podAntiAffinity = {
              requiredDuringSchedulingIgnoredDuringExecution = [{ labelSelector = { matchLabels = local.selector }, topologyKey = "kubernetes.io/hostname" }]
            }
          }
          topologySpreadConstraints = [{ maxSkew = 1, topologyKey = "topology.kubernetes.io/zone", whenUnsatisfiable = "ScheduleAnyway", labelSelector = { matchLabels = local.selector } }]
          containers = [{
            name  = "holdfast"
            image = var.image
            args  = [var.role, "run", "--config", "/etc/holdfast/config/$(POD_NAME).toml"]
            env = concat([{ name = "POD_NAME", valueFrom = { fieldRef = { fieldPath = "metadata.name" } } }],
            [for e in [var.otlp_endpoint] : { name = "OTEL_EXPORTER_OTLP_ENDPOINT", value = e } if e != ""])
            ports = local.ports
            # A node is ready once it serves (docs/deploy.md, "Probes"). No liveness
            # probe: restarting a slow node only makes it slower to catch up.
            readinessProbe  = [local.probe_http, local.probe_tcp][var.ports.http > 0 ? 0 : 1]
            resources       = { requests = { cpu = var.resources.cpu, memory = var.resources.memory }, limits = { memory = var.resources.memory_limit } }
            securityContext = { readOnlyRootFilesystem = true, allowPrivilegeEscalation = false }
            volumeMounts    = local.mounts
          }]
          volumes = local.volumes
        }
      }
      volumeClaimTemplates = [{
        metadata = { name = "data" }
        spec = {
          accessModes      = ["ReadWriteOnce"]
          storageClassName = var.storage.class
          resources        = { requests = { storage = var.storage.size } }
        }
      }]
    }
  }

  pdb = {
    apiVersion = "policy/v1"
    kind       = "PodDisruptionBudget"
    metadata   = { name = var.name, namespace = var.namespace, labels = local.labels }
    # A 3-node group keeps a quorum with one node out; a 1-voter set (a region's
    # registry voter) may go, the other regions' voters keep the registry's quorum.
    spec = { maxUnavailable = 1, selector = { matchLabels = local.selector } }
  }

  certificate = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = var.name, namespace = var.namespace, labels = local.labels }
    spec = {
      secretName = local.tls_secret
      commonName = var.name
      dnsNames   = var.cert_hosts
      uris       = ["holdfast://node/${var.name}"]
      usages     = ["server auth", "client auth"]
      privateKey = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      issuerRef  = { name = var.cert_manager_issuer, kind = "ClusterIssuer" }
    }
  }
}

output "manifests" {
  description = "The set's Kubernetes objects, in apply order."
  value = concat(
    [local.config_map, local.service, local.stateful_set, local.pdb],
    slice([local.certificate], 0, var.cert_manager_issuer != "" && !var.insecure ? 1 : 0),
  )
}
