# A cell's Kubernetes objects (pure: see ../raft-set): its nodes as one StatefulSet,
# with the configs modules/topology rendered for them.

terraform {
  required_version = ">= 1.0.0"
}

variable "topology" {
  description = "modules/topology's outputs (processes and cells)."
  type        = any
}

variable "cell" {
  description = "The cell's name (a key of topology.cells)."
  type        = string
}

variable "settings" {
  description = "What every pod shares: namespace, image, data_root, certs_root, insecure, storage, resources, cert_manager_issuer, otlp_endpoint."
  type        = any
}

locals {
  pods = { for name, p in var.topology.processes : name => p if p.role == "cell" && p.cell == var.cell }
  any  = values(local.pods)[0]
}

module "set" {
  source              = "../raft-set"
  name                = var.cell
  role                = "cell"
  region              = local.any.region
  namespace           = var.settings.namespace
  image               = var.settings.image
  configs             = { for name, p in local.pods : name => p.config }
  cert_hosts          = distinct(flatten([for p in values(local.pods) : p.cert_hosts]))
  ports               = local.any.ports
  data_root           = var.settings.data_root
  certs_root          = var.settings.certs_root
  insecure            = var.settings.insecure
  storage             = var.settings.storage
  resources           = var.settings.resources
  cert_manager_issuer = var.settings.cert_manager_issuer
  otlp_endpoint       = var.settings.otlp_endpoint
}

output "manifests" {
  value = module.set.manifests
}
