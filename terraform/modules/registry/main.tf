# One region's registry voter as Kubernetes objects (pure: see ../raft-set). The
# registry has one voter per region; this module is applied once per region.

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

variable "settings" {
  description = "What every pod shares: namespace, image, data_root, certs_root, insecure, storage, resources, cert_manager_issuer, otlp_endpoint."
  type        = any
}

locals {
  name  = "registry-${var.region}"
  voter = var.topology.processes[local.name]
}

module "set" {
  source = "../raft-set"
  name   = local.name
  role   = "registry"
  region = var.region
  # The StatefulSet's one pod is <name>-0; topology renders the voter's config under
  # the set's name.
  configs             = { "${local.name}-0" = local.voter.config }
  namespace           = var.settings.namespace
  image               = var.settings.image
  cert_hosts          = local.voter.cert_hosts
  ports               = local.voter.ports
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
