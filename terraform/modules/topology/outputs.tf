output "processes" {
  description = <<-EOT
    Every process, by name: its role (cell, registry or gateway), region, the
    StatefulSet or Deployment it belongs to, node id (Raft nodes), the hosts its
    certificate must name, its data and certificates directories, its addresses, and
    its rendered configuration file (`holdfast <role> run --config <file>`).
  EOT
  value = merge(
    { for n in local.cell_nodes : n.name => {
      role        = "cell"
      region      = n.region
      set         = n.set
      cell        = n.cell
      node_id     = n.node_id
      cert_hosts  = [n.host]
      data_dir    = "${var.data_root}/${n.name}"
      certs_dir   = local.certs_dir[n.name]
      client_addr = "${n.host}:${n.client_port}"
      raft_addr   = "${n.host}:${n.raft_port}"
      http_addr   = "${n.host}:${n.metrics_port}"
      ports       = { client = n.client_port, raft = n.raft_port, http = n.metrics_port }
      config      = local.cell_configs[n.name]
    } },
    { for v in local.registry : v.name => {
      role        = "registry"
      region      = v.region
      set         = v.set
      cell        = ""
      node_id     = v.node_id
      cert_hosts  = [v.host]
      data_dir    = "${var.data_root}/${v.name}"
      certs_dir   = local.certs_dir[v.name]
      client_addr = "${v.host}:${v.client_port}"
      raft_addr   = "${v.host}:${v.raft_port}"
      http_addr   = "${v.host}:${v.metrics_port}"
      ports       = { client = v.client_port, raft = v.raft_port, http = v.metrics_port }
      config      = local.registry_configs[v.name]
    } },
    { for g in local.gateways : g.name => {
      role        = "gateway"
      region      = g.region
      set         = g.set
      cell        = ""
      node_id     = 0
      cert_hosts  = [g.host]
      data_dir    = ""
      certs_dir   = local.certs_dir[g.name]
      client_addr = "${g.host}:${g.grpc_port}"
      raft_addr   = ""
      http_addr   = "${g.host}:${g.http_port}"
      ports       = { client = g.grpc_port, raft = 0, http = g.http_port }
      config      = local.gateway_configs[g.name]
    } },
  )
}

output "cells" {
  description = "Every cell: its region and its members (node id, Raft and client addresses)."
  value = { for c in local.cells : c.name => {
    region  = c.region
    members = [for n in local.cell_nodes : { node_id = n.node_id, name = n.name, raft_addr = "${n.host}:${n.raft_port}", client_addr = "${n.host}:${n.client_port}" } if n.cell == c.name]
  } }
}

output "gateways" {
  description = "Per region, its gateways' gRPC and HTTP addresses: what clients and operators call (`--endpoints`)."
  value       = { for g in local.gateways : g.region => { grpc = "${g.host}:${g.grpc_port}", http = "${g.host}:${g.http_port}" } }
}

output "endpoints" {
  description = "Every gateway's gRPC address, comma-separated: the value of HOLDFAST_ENDPOINTS for operators."
  value       = join(",", [for g in local.gateways : "${g.host}:${g.grpc_port}"])
}

output "registry_endpoints" {
  description = "Every registry voter's client address, comma-separated (the first region's first)."
  value       = local.registry_endpoints[var.regions[0].name]
}

output "bootstrap" {
  description = "A shell script that forms the deployment once (docs/deploy.md, \"Form it\"); TLS flags given to it are passed to every command."
  value       = local.bootstrap
}
