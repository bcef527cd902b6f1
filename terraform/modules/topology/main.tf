# The shape of a holdfast deployment, derived from a few inputs: every process's name,
# node id, addresses and certificate hosts, its rendered configuration file, and the
# commands that form it once. Pure Terraform (no provider): the role modules
# (../cell, ../registry, ../gateway) and the single-host test take its outputs.

locals {
  # Standard ports, one process per host (docs/deploy.md, "Ports").
  std = {
    gateway_grpc    = 7000
    gateway_http    = 7001
    registry_client = 7200
    registry_raft   = 7201
    registry_http   = 7202
    cell_client     = 7300
    cell_raft       = 7301
    cell_metrics    = 7302
  }

  # single_host: region r owns base_port + 100 r .. + 99: its gateway +0 (gRPC) and +1
  # (HTTP), its registry voter +10 (client), +11 (Raft) and +12 (metrics), node j of cell c
  # +20 + 10 c + 3 j (client), +1 (Raft), +2 (metrics).
  region_base = { for i, r in var.regions : r.name => var.base_port + 100 * i }

  cells = flatten([for r in var.regions : [for c in range(r.cells) : {
    name   = "${r.name}-${c + 1}"
    region = r.name
    index  = c
  }]])

  cell_nodes = flatten([for cell in local.cells : [for j in range(var.nodes_per_cell) : {
    name    = "${cell.name}-${j}"
    set     = cell.name
    cell    = cell.name
    region  = cell.region
    node_id = j + 1
    host = var.single_host ? var.listen_host : replace(replace(replace(replace(var.host_pattern,
    "{pod}", "${cell.name}-${j}"), "{set}", cell.name), "{region}", cell.region), "{namespace}", var.namespace)
    client_port  = var.single_host ? local.region_base[cell.region] + 20 + 10 * cell.index + 3 * j : local.std.cell_client
    raft_port    = var.single_host ? local.region_base[cell.region] + 21 + 10 * cell.index + 3 * j : local.std.cell_raft
    metrics_port = var.single_host ? local.region_base[cell.region] + 22 + 10 * cell.index + 3 * j : local.std.cell_metrics
  }]])

  registry = [for i, r in var.regions : {
    name    = "registry-${r.name}"
    set     = "registry-${r.name}"
    region  = r.name
    node_id = i + 1
    host = var.single_host ? var.listen_host : replace(replace(replace(replace(var.host_pattern,
    "{pod}", "registry-${r.name}-0"), "{set}", "registry-${r.name}"), "{region}", r.name), "{namespace}", var.namespace)
    client_port  = var.single_host ? local.region_base[r.name] + 10 : local.std.registry_client
    raft_port    = var.single_host ? local.region_base[r.name] + 11 : local.std.registry_raft
    metrics_port = var.single_host ? local.region_base[r.name] + 12 : local.std.registry_http
  }]

  gateways = [for r in var.regions : {
    name   = "gateway-${r.name}"
    set    = "gateway-${r.name}"
    region = r.name
    host = var.single_host ? var.listen_host : replace(replace(replace(var.gateway_host_pattern,
    "{set}", "gateway-${r.name}"), "{region}", r.name), "{namespace}", var.namespace)
    grpc_port = var.single_host ? local.region_base[r.name] : local.std.gateway_grpc
    http_port = var.single_host ? local.region_base[r.name] + 1 : local.std.gateway_http
  }]

  # A process's registry list starts with its own region's voter: the nearest answers
  # first, the others are the failover.
  registry_endpoints = { for r in var.regions : r.name => join(",", concat(
    [for v in local.registry : "${v.host}:${v.client_port}" if v.region == r.name],
    [for v in local.registry : "${v.host}:${v.client_port}" if v.region != r.name],
  )) }

  certs_dir = { for name in concat([for n in local.cell_nodes : n.name], [for v in local.registry : v.name], [for g in local.gateways : g.name]) :
  name => var.per_process_certs ? "${var.certs_root}/${name}" : var.certs_root }

  cell_configs = { for n in local.cell_nodes : n.name => templatefile("${path.module}/templates/cell.toml.tftpl", {
    deployment         = var.deployment
    node               = n
    listen_host        = var.listen_host
    data_dir           = "${var.data_root}/${n.name}"
    certs_dir          = local.certs_dir[n.name]
    insecure           = var.insecure
    registry_endpoints = local.registry_endpoints[n.region]
    raft               = var.raft
  }) }

  registry_configs = { for v in local.registry : v.name => templatefile("${path.module}/templates/registry.toml.tftpl", {
    deployment  = var.deployment
    node        = v
    listen_host = var.listen_host
    data_dir    = "${var.data_root}/${v.name}"
    certs_dir   = local.certs_dir[v.name]
    insecure    = var.insecure
    raft        = var.raft
  }) }

  gateway_configs = { for g in local.gateways : g.name => templatefile("${path.module}/templates/gateway.toml.tftpl", {
    deployment         = var.deployment
    gateway            = g
    listen_host        = var.listen_host
    certs_dir          = local.certs_dir[g.name]
    insecure           = var.insecure
    registry_endpoints = local.registry_endpoints[g.region]
  }) }

  bootstrap = templatefile("${path.module}/templates/bootstrap.sh.tftpl", {
    deployment = var.deployment
    registry   = local.registry
    cells = [for c in local.cells : {
      name    = c.name
      region  = c.region
      members = [for n in local.cell_nodes : n if n.cell == c.name]
    }]
    regions            = [for r in var.regions : r.name]
    registry_endpoints = local.registry_endpoints[var.regions[0].name]
  })
}
