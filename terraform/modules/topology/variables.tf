variable "deployment" {
  description = "Name of the deployment, used in comments and certificate names."
  type        = string
  default     = "holdfast"
}

variable "regions" {
  description = <<-EOT
    The regions, in order: each runs one registry voter, one gateway set and `cells`
    cells of `nodes_per_cell` nodes. The registry needs an odd number of regions (3 or
    5): one voter per region, so losing one region keeps a quorum.
  EOT
  type = list(object({
    name  = string
    cells = number
  }))

  validation {
    condition     = length(var.regions) % 2 == 1 && length(var.regions) <= 7
    error_message = "The registry has one voter per region: use an odd number of regions, at most 7."
  }
  validation {
    condition     = alltrue([for r in var.regions : can(regex("^[a-z][a-z0-9-]{0,30}$", r.name))])
    error_message = "Region names: lower-case letters, digits and dashes, starting with a letter, at most 31 characters."
  }
  validation {
    condition     = alltrue([for r in var.regions : r.cells >= 1 && r.cells <= 8])
    error_message = "Each region has between 1 and 8 cells."
  }
}

variable "nodes_per_cell" {
  description = "Voters per cell: 3 (one failure) or 5 (two)."
  type        = number
  default     = 3

  validation {
    condition     = contains([3, 5], var.nodes_per_cell)
    error_message = "A cell has 3 or 5 voters."
  }
}

variable "single_host" {
  description = <<-EOT
    Every process on one host (a test, or a demo on one VM): processes listen on
    `listen_host` and each gets its own ports counted from `base_port` (docs/deploy.md,
    "Ports"). False (the default): every process has its own host and the standard
    ports.
  EOT
  type        = bool
  default     = false
}

variable "base_port" {
  description = "single_host only: region r uses base_port + 100 r up to + 99."
  type        = number
  default     = 17000
}

variable "listen_host" {
  description = "The IP every process binds to (0.0.0.0 in a pod; 127.0.0.1 for a single-host test)."
  type        = string
  default     = "0.0.0.0"
}

variable "host_pattern" {
  description = <<-EOT
    The DNS name (or IP) other processes reach a Raft node at. Placeholders: {pod} (the
    node's name, e.g. `east-1-0`), {set} (its StatefulSet, e.g. `east-1`), {region},
    {namespace}. The default suits one Kubernetes cluster; across regional clusters use
    names every cluster resolves (multi-cluster DNS), e.g.
    "{pod}.{set}.{namespace}.svc.{region}.example.internal".
  EOT
  type        = string
  default     = "{pod}.{set}.{namespace}.svc.cluster.local"
}

variable "gateway_host_pattern" {
  description = "The DNS name clients reach a region's gateways at (their Service). Placeholders: {set}, {region}, {namespace}."
  type        = string
  default     = "{set}.{namespace}.svc.cluster.local"
}

variable "namespace" {
  description = "The Kubernetes namespace (the {namespace} placeholder)."
  type        = string
  default     = "holdfast"
}

variable "data_root" {
  description = "Where each node's RocksDB directory lives: <data_root>/<node name>."
  type        = string
  default     = "/var/lib/holdfast"
}

variable "certs_root" {
  description = "Where each process finds ca.crt, node.crt and node.key: <certs_root>/<process name> (or exactly certs_root when per_process_certs is false)."
  type        = string
  default     = "/etc/holdfast/certs"
}

variable "per_process_certs" {
  description = "True: <certs_root>/<process name> (one host, many processes). False: <certs_root> (one process per pod, its secret mounted there)."
  type        = bool
  default     = false
}

variable "insecure" {
  description = "Plaintext and no authentication on every port. Never for a deployment; for a throwaway test only."
  type        = bool
  default     = false
}

variable "raft" {
  description = <<-EOT
    Raft timings of every node, ms. The defaults suit nodes of one region (sub-ms
    round trips); the registry spans regions, so its elections are slower
    (docs/guarantees.md, "Failover"). A cell's ownership lease is 35 minutes: cells
    serve what they own through a registry outage that long, less 2.6 s (docs/registry.md,
    "Static stability"), renewing every second.
  EOT
  type = object({
    cell_heartbeat_ms        = number
    cell_election_min_ms     = number
    cell_election_max_ms     = number
    registry_heartbeat_ms    = number
    registry_election_min_ms = number
    registry_election_max_ms = number
    ownership_lease_ms       = number
  })
  default = {
    cell_heartbeat_ms        = 100
    cell_election_min_ms     = 300
    cell_election_max_ms     = 500
    registry_heartbeat_ms    = 250
    registry_election_min_ms = 1000
    registry_election_max_ms = 2000
    ownership_lease_ms       = 2100000
  }
}
