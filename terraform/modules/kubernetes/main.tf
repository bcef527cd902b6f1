# Every Kubernetes object of a deployment, by region, from a few inputs: the topology
# (modules/topology) rendered for one process per pod, then each role's objects
# (../cell, ../registry, ../gateway). Pure Terraform: examples/three-regions applies
# each region's list with that region's provider, and CI renders and checks it
# offline (terraform/tests/check_manifests.py).

terraform {
  required_version = ">= 1.0.0"
}

variable "deployment" {
  type    = string
  default = "holdfast"
}

variable "regions" {
  description = "As modules/topology: name and number of cells of each region."
  type        = list(object({ name = string, cells = number }))
}

variable "nodes_per_cell" {
  type    = number
  default = 3
}

variable "host_pattern" {
  description = "As modules/topology: the name a Raft pod is reached at from every region."
  type        = string
}

variable "gateway_host_pattern" {
  description = "As modules/topology: the name a region's gateway Service is reached at."
  type        = string
}

variable "namespace" {
  type    = string
  default = "holdfast"
}

variable "image" {
  description = "The holdfast image (terraform/image/Containerfile), by digest in production."
  type        = string
}

variable "cert_manager_issuer" {
  description = "A cert-manager ClusterIssuer holding the cluster's CA; empty: make each <set>-tls secret with `holdfast cert create-node` (docs/deploy.md)."
  type        = string
  default     = ""
}

variable "otlp_endpoint" {
  description = "An OTLP/gRPC collector (http://collector:4317) every pod exports traces to, as OTEL_EXPORTER_OTLP_ENDPOINT; empty: no traces (docs/observability.md)."
  type        = string
  default     = ""
}

variable "gateway_replicas" {
  type    = number
  default = 2
}

variable "storage" {
  type    = object({ size = string, class = string })
  default = { size = "20Gi", class = "standard" }
}

variable "resources" {
  description = "Per pod, by role (docs/deploy.md, \"Sizing\")."
  type        = map(object({ cpu = string, memory = string, memory_limit = string }))
  default = {
    cell     = { cpu = "1", memory = "1Gi", memory_limit = "2Gi" }
    registry = { cpu = "500m", memory = "512Mi", memory_limit = "1Gi" }
    gateway  = { cpu = "1", memory = "256Mi", memory_limit = "512Mi" }
  }
}

locals {
  data_root  = "/var/lib/holdfast"
  certs_root = "/etc/holdfast/certs"
  settings = { for role, r in var.resources : role => {
    namespace           = var.namespace
    image               = var.image
    data_root           = local.data_root
    certs_root          = local.certs_root
    insecure            = false
    storage             = var.storage
    resources           = r
    cert_manager_issuer = var.cert_manager_issuer
    otlp_endpoint       = var.otlp_endpoint
  } }
}

module "topology" {
  source               = "../topology"
  deployment           = var.deployment
  regions              = var.regions
  nodes_per_cell       = var.nodes_per_cell
  host_pattern         = var.host_pattern
  gateway_host_pattern = var.gateway_host_pattern
  namespace            = var.namespace
  data_root            = local.data_root
  certs_root           = local.certs_root
}

module "cell" {
  source   = "../cell"
  for_each = module.topology.cells
  topology = module.topology
  cell     = each.key
  settings = local.settings.cell
}

module "registry" {
  source   = "../registry"
  for_each = toset([for r in var.regions : r.name])
  topology = module.topology
  region   = each.key
  settings = local.settings.registry
}

module "gateway" {
  source   = "../gateway"
  for_each = toset([for r in var.regions : r.name])
  topology = module.topology
  region   = each.key
  replicas = var.gateway_replicas
  settings = local.settings.gateway
}

output "manifests" {
  description = "By region: every object, keyed <kind>/<name>, for kubernetes_manifest's for_each."
  value = { for r in var.regions : r.name => merge(
    { for m in module.registry[r.name].manifests : "${m.kind}/${m.metadata.name}" => m },
    merge([for c, mod in module.cell : { for m in mod.manifests : "${m.kind}/${m.metadata.name}" => m } if module.topology.cells[c].region == r.name]...),
    { for m in module.gateway[r.name].manifests : "${m.kind}/${m.metadata.name}" => m },
  ) }
}

output "bootstrap" {
  description = "modules/topology's bootstrap script for this deployment (run once, with the operator's certificate)."
  value       = module.topology.bootstrap
}

output "endpoints" {
  value = module.topology.endpoints
}
