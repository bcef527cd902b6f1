//! `<data-dir>/endpoints.json`: where every process of a running playground is — its
//! addresses, its pid, its log, the command line it was started with, and (with
//! `--netns`) its region's network namespace. `holdfast dev` writes it (only while the
//! playground is up and ready); `holdfast drill` and the tests read it. The format is
//! in docs/playground.md.

use super::layout::{self, Layout, NodeSpec};
use super::supervisor::Supervisor;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoints {
    pub version: u32,
    pub data_dir: PathBuf,
    /// `holdfast dev` itself: SIGTERM stops the playground, SIGHUP restarts what exited.
    pub supervisor_pid: u32,
    /// Every registry voter's client address, comma-separated.
    pub registry_endpoints: String,
    pub demo: Demo,
    /// `None` unless started with `--netns`.
    pub netns: Option<Netns>,
    /// Where root's client certificate is; `None` when started with `--insecure`.
    #[serde(default)]
    pub tls: Option<Tls>,
    /// In the playground's order (east first).
    pub regions: IndexMap<String, RegionEndpoints>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tls {
    /// `ca.crt`, `client.root.crt` and `client.root.key`; node certificates under
    /// `nodes/<name>/`.
    pub certs_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Demo {
    pub ns: String,
    pub shard: String,
    pub cell: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Netns {
    pub bridge: String,
    pub bridge_ip: String,
    pub prefix_len: u8,
    pub regions: IndexMap<String, RegionNetns>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegionNetns {
    pub netns: String,
    /// The region's port on the bridge: `bridge link set dev <it> state 0` cuts the
    /// region off, `state 3` heals it.
    pub host_veth: String,
    pub veth: String,
    pub ip: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegionEndpoints {
    pub gateway: GatewayEndpoints,
    pub registry: NodeEndpoints,
    pub cells: Vec<CellEndpoints>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayEndpoints {
    pub name: String,
    pub grpc: String,
    pub http: String,
    pub pid: Option<u32>,
    pub log: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellEndpoints {
    pub cell: String,
    pub nodes: Vec<NodeEndpoints>,
}

/// One Raft node: a registry voter or a cell node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEndpoints {
    pub name: String,
    pub node_id: u64,
    pub raft: String,
    pub client: String,
    pub metrics: Option<String>,
    pub pid: Option<u32>,
    pub data_dir: PathBuf,
    pub log: Option<PathBuf>,
    pub argv: Vec<String>,
}

impl Endpoints {
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("endpoints.json")
    }

    /// What the supervisor runs now, as laid out.
    pub fn of(sup: &Supervisor, layout: &Layout, demo: Demo) -> Endpoints {
        let log = |name: &str| sup.procs().iter().find(|p| p.name == name).map(|p| p.log.clone());
        let node = |n: &NodeSpec| NodeEndpoints {
            name: n.name.clone(),
            node_id: n.node_id,
            raft: n.raft.clone(),
            client: n.client.clone(),
            metrics: n.metrics.clone(),
            pid: sup.pid(&n.name),
            data_dir: n.data_dir.clone(),
            log: log(&n.name),
            argv: sup.procs().iter().find(|p| p.name == n.name).map(|p| p.argv.clone()).unwrap_or_default(),
        };
        let regions = layout
            .regions
            .iter()
            .map(|r| {
                let g = &r.gateway;
                let region = RegionEndpoints {
                    gateway: GatewayEndpoints { name: g.name.clone(), grpc: g.grpc.clone(), http: g.http.clone(), pid: sup.pid(&g.name), log: log(&g.name) },
                    registry: node(&r.registry),
                    cells: vec![CellEndpoints { cell: r.cell.name.clone(), nodes: r.cell.nodes.iter().map(node).collect() }],
                };
                (r.name.clone(), region)
            })
            .collect();
        let netns = layout.netns.as_ref().map(|n| Netns {
            bridge: n.bridge.clone(),
            bridge_ip: n.bridge_ip.clone(),
            prefix_len: layout::NETNS_PREFIX,
            regions: n
                .regions
                .iter()
                .map(|r| {
                    (r.region.clone(), RegionNetns { netns: r.netns.clone(), host_veth: r.host_veth.clone(), veth: r.peer_veth.clone(), ip: r.ip.clone() })
                })
                .collect(),
        });
        Endpoints {
            version: VERSION,
            data_dir: layout.data_dir.clone(),
            supervisor_pid: std::process::id(),
            registry_endpoints: layout.registry_endpoints(None),
            demo,
            netns,
            tls: (!layout.insecure).then(|| Tls { certs_dir: super::certs::dir(&layout.data_dir) }),
            regions,
        }
    }

    /// The command line's TLS settings for this playground: root's certificate.
    pub fn client_tls(&self) -> crate::remote::ClientTls {
        match &self.tls {
            Some(t) => crate::remote::ClientTls { certs_dir: Some(t.certs_dir.clone()), user: "root".into(), insecure: false },
            None => crate::remote::ClientTls { certs_dir: None, user: "root".into(), insecure: true },
        }
    }

    pub fn write(&self, data_dir: &Path) -> Result<(), String> {
        layout::write_atomic(&Endpoints::file(data_dir), &serde_json::to_string_pretty(self).expect("endpoints serialize"))
    }

    /// Reads a running playground's endpoints.json.
    pub fn read(data_dir: &Path) -> Result<Endpoints, String> {
        let f = Endpoints::file(data_dir);
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e} (is `holdfast dev --data-dir {}` running?)", f.display(), data_dir.display()))?;
        let e: Endpoints = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        if e.version != VERSION {
            return Err(format!("{}: format version {}, this holdfast reads {VERSION}", f.display(), e.version));
        }
        Ok(e)
    }
}
