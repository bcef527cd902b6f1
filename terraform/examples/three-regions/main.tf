# Three regions, one Kubernetes cluster each: a registry voter per region, cells of
# three nodes, gateways. Every object comes from modules/kubernetes (pure, checked in
# CI); this root only applies each region's objects with that region's provider.
#
#   terraform init
#   terraform apply -var-file=topology.tfvars.json -var image=registry.example/holdfast@sha256:...
#   terraform output -raw bootstrap > bootstrap.sh     # then docs/deploy.md, "Form it"
#
# Cross-cluster names: every cluster must resolve every other's pod names
# (host_pattern), e.g. through a multi-cluster DNS or a Kubernetes MCS implementation.

terraform {
  required_version = ">= 1.0.0"
  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.20.0"
    }
  }
}

variable "deployment" {
  type = string
}

variable "regions" {
  type = list(object({ name = string, cells = number }))
}

variable "nodes_per_cell" {
  type = number
}

variable "host_pattern" {
  type = string
}

variable "gateway_host_pattern" {
  type = string
}

variable "image" {
  type = string
}

variable "cert_manager_issuer" {
  type    = string
  default = "holdfast-ca"
}

variable "otlp_endpoint" {
  description = "An OTLP/gRPC collector for traces; empty: none."
  type        = string
  default     = ""
}

variable "kubeconfig_contexts" {
  description = "The kubectl context of each region's cluster."
  type        = map(string)
  default     = { east = "east", west = "west", south = "south" }
}

provider "kubernetes" {
  alias          = "east"
  config_path    = "~/.kube/config"
  config_context = var.kubeconfig_contexts["east"]
}

provider "kubernetes" {
  alias          = "west"
  config_path    = "~/.kube/config"
  config_context = var.kubeconfig_contexts["west"]
}

provider "kubernetes" {
  alias          = "south"
  config_path    = "~/.kube/config"
  config_context = var.kubeconfig_contexts["south"]
}

module "holdfast" {
  source               = "../../modules/kubernetes"
  deployment           = var.deployment
  regions              = var.regions
  nodes_per_cell       = var.nodes_per_cell
  host_pattern         = var.host_pattern
  gateway_host_pattern = var.gateway_host_pattern
  image                = var.image
  cert_manager_issuer  = var.cert_manager_issuer
  otlp_endpoint        = var.otlp_endpoint
}

resource "kubernetes_manifest" "east" {
  provider = kubernetes.east
  for_each = module.holdfast.manifests["east"]
  manifest = each.value
}

resource "kubernetes_manifest" "west" {
  provider = kubernetes.west
  for_each = module.holdfast.manifests["west"]
  manifest = each.value
}

resource "kubernetes_manifest" "south" {
  provider = kubernetes.south
  for_each = module.holdfast.manifests["south"]
  manifest = each.value
}

output "bootstrap" {
  value = module.holdfast.bootstrap
}

output "endpoints" {
  value = module.holdfast.endpoints
}
