//! Where every playground process lives: names, node ids, ports and directories, all
//! derived from the base port and the region count, so a restart on the same data
//! directory finds the same addresses (Raft members are known by them).
//!
//! Ports, per region `r` (0-based), at `base + 20 r +`:
//! `0` gateway gRPC, `1` gateway HTTP, `2` registry client, `3` registry Raft,
//! `4..=6` cell nodes' client, `7..=9` cell nodes' Raft, `10..=12` cell nodes' metrics,
//! `13` the registry voter's metrics.
//!
//! Hosts: `127.0.0.1`, or with `--netns` region `r`'s own address `10.B.b.(r+1)` in its
//! own network namespace, where `B.b` are the base port's two bytes (`base = 256 B + b`:
//! 7000 is `10.27.88.0/24`), so two playgrounds with different base ports never share a
//! subnet or an interface name. See [`NetnsLayout`].

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const REGION_NAMES: [&str; 5] = ["east", "west", "south", "north", "central"];
pub const PORTS_PER_REGION: u16 = 20;
pub const CELL_NODES: u64 = 3;
const HOST: &str = "127.0.0.1";

/// What a data directory was created with; kept in `<data-dir>/dev.json` so a restart
/// needs no flags and a restart with different ones is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub version: u32,
    pub base_port: u16,
    pub regions: usize,
    /// Set once the registry, the cells and the demo namespace are formed: a restart
    /// does not form them again.
    pub initialized: bool,
    /// Each region in its own network namespace (`--netns`). Absent in older dev.json
    /// files: false.
    #[serde(default)]
    pub netns: bool,
    /// Plaintext, no certificates (`--insecure`). Absent in older dev.json files:
    /// false (TLS).
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Debug, Clone)]
pub struct Layout {
    pub data_dir: PathBuf,
    pub regions: Vec<RegionLayout>,
    /// `--netns`: the bridge and each region's namespace, veth pair and address.
    pub netns: Option<NetnsLayout>,
    /// Plaintext (`--insecure`), or mutual TLS with the certificates under `certs/`.
    pub insecure: bool,
    /// How the supervisor itself calls the playground (root's certificate), made on
    /// first use: the certificates exist only once `certs::ensure` ran.
    transport: std::sync::Arc<std::sync::OnceLock<holdfast_rpc::Transport>>,
}

/// Names and addresses of a `--netns` playground, all derived from the base port:
/// bridge `hf<base>br` (address `10.B.b.254/24`) in the root namespace; per region `r`
/// a namespace `hf<base>-<region>` holding `hf<base>r<r>i` (address `10.B.b.(r+1)/24`),
/// the peer of `hf<base>r<r>`, a port of the bridge. Interface names stay within
/// Linux's 15 characters (`hf65535r4i` is 10).
#[derive(Debug, Clone)]
pub struct NetnsLayout {
    pub bridge: String,
    /// The bridge's address, without the prefix length.
    pub bridge_ip: String,
    pub regions: Vec<RegionNet>,
}

#[derive(Debug, Clone)]
pub struct RegionNet {
    pub region: String,
    pub netns: String,
    /// In the root namespace, a port of the bridge: `bridge link set dev <it> state 0`
    /// cuts the region off, `state 3` heals it.
    pub host_veth: String,
    /// Inside the namespace, carrying `ip`.
    pub peer_veth: String,
    pub ip: String,
}

/// The netmask of the playground's subnet.
pub const NETNS_PREFIX: u8 = 24;

impl NetnsLayout {
    pub fn new(base_port: u16, regions: usize) -> NetnsLayout {
        let subnet = format!("10.{}.{}", base_port >> 8, base_port & 0xff);
        NetnsLayout {
            bridge: format!("hf{base_port}br"),
            bridge_ip: format!("{subnet}.254"),
            regions: REGION_NAMES[..regions]
                .iter()
                .enumerate()
                .map(|(r, name)| RegionNet {
                    region: (*name).to_owned(),
                    netns: format!("hf{base_port}-{name}"),
                    host_veth: format!("hf{base_port}r{r}"),
                    peer_veth: format!("hf{base_port}r{r}i"),
                    ip: format!("{subnet}.{}", r + 1),
                })
                .collect(),
        }
    }

    pub fn region(&self, name: &str) -> Option<&RegionNet> {
        self.regions.iter().find(|r| r.region == name)
    }
}

#[derive(Debug, Clone)]
pub struct RegionLayout {
    pub name: String,
    pub gateway: GatewaySpec,
    pub registry: NodeSpec,
    pub cell: CellSpec,
}

#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub name: String,
    pub grpc: String,
    pub http: String,
}

/// One Raft node (a registry voter or a cell node).
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Process name: log file and endpoints.json key.
    pub name: String,
    pub node_id: u64,
    pub raft: String,
    pub client: String,
    /// /metrics, /healthz, /readyz.
    pub metrics: Option<String>,
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone)]
pub struct CellSpec {
    pub name: String,
    pub nodes: Vec<NodeSpec>,
}

impl Layout {
    pub fn new(data_dir: &Path, s: Settings) -> Result<Layout, String> {
        s.validate()?;
        let netns = s.netns.then(|| NetnsLayout::new(s.base_port, s.regions));
        let host = |r: usize| netns.as_ref().map_or(HOST.to_owned(), |n| n.regions[r].ip.clone());
        let addr = |r: usize, off: u16| format!("{}:{}", host(r), s.base_port + PORTS_PER_REGION * r as u16 + off);
        let regions = REGION_NAMES[..s.regions]
            .iter()
            .enumerate()
            .map(|(r, name)| {
                let cell = format!("{name}-1");
                let nodes = (1..=CELL_NODES)
                    .map(|id| {
                        let i = id as u16 - 1;
                        NodeSpec {
                            name: format!("{cell}-n{id}"),
                            node_id: id,
                            client: addr(r, 4 + i),
                            raft: addr(r, 7 + i),
                            metrics: Some(addr(r, 10 + i)),
                            data_dir: data_dir.join(&cell).join(format!("node-{id}")),
                        }
                    })
                    .collect();
                let reg_id = r as u64 + 1;
                RegionLayout {
                    name: (*name).to_owned(),
                    gateway: GatewaySpec { name: format!("gateway-{name}"), grpc: addr(r, 0), http: addr(r, 1) },
                    registry: NodeSpec {
                        name: format!("registry-{reg_id}"),
                        node_id: reg_id,
                        client: addr(r, 2),
                        raft: addr(r, 3),
                        metrics: Some(addr(r, 13)),
                        data_dir: data_dir.join(format!("registry-{reg_id}")),
                    },
                    cell: CellSpec { name: cell, nodes },
                }
            })
            .collect();
        Ok(Layout { data_dir: data_dir.to_owned(), regions, netns, insecure: s.insecure, transport: Default::default() })
    }

    /// Every process's name and the host it listens on.
    pub fn processes(&self) -> Vec<(String, String)> {
        let host = |addr: &str| addr.rsplit_once(':').map_or(addr.to_owned(), |(h, _)| h.to_owned());
        let mut out = Vec::new();
        for r in &self.regions {
            out.push((r.gateway.name.clone(), host(&r.gateway.grpc)));
            out.push((r.registry.name.clone(), host(&r.registry.client)));
            out.extend(r.cell.nodes.iter().map(|n| (n.name.clone(), host(&n.client))));
        }
        out
    }

    /// The flags that give process `name` its certificates (or plaintext).
    pub fn tls_args(&self, name: &str) -> Vec<String> {
        if self.insecure {
            vec!["--insecure".into()]
        } else {
            vec!["--certs-dir".into(), super::certs::node_dir(&self.data_dir, name).display().to_string()]
        }
    }

    /// The command line's TLS settings for this playground: root's certificate.
    pub fn client_tls(&self) -> crate::remote::ClientTls {
        crate::remote::ClientTls { certs_dir: Some(super::certs::dir(&self.data_dir)), user: "root".into(), insecure: self.insecure }
    }

    /// How the supervisor calls the playground.
    pub fn transport(&self) -> Result<&holdfast_rpc::Transport, String> {
        if let Some(t) = self.transport.get() {
            return Ok(t);
        }
        let t = holdfast_rpc::Transport::new(holdfast_rpc::TransportOptions::default(), self.client_tls().security()?);
        Ok(self.transport.get_or_init(|| t))
    }

    pub fn registry_nodes(&self) -> impl Iterator<Item = &NodeSpec> {
        self.regions.iter().map(|r| &r.registry)
    }

    /// Registry client addresses, comma-separated, starting with `first_region`'s voter
    /// (a gateway asks its own region's voter first).
    pub fn registry_endpoints(&self, first_region: Option<&str>) -> String {
        let mut addrs: Vec<&RegionLayout> = self.regions.iter().collect();
        addrs.sort_by_key(|r| Some(r.name.as_str()) != first_region);
        addrs.iter().map(|r| r.registry.client.as_str()).collect::<Vec<_>>().join(",")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.data_dir.join("logs")
    }

    pub fn settings_file(data_dir: &Path) -> PathBuf {
        data_dir.join("dev.json")
    }

    pub fn endpoints_file(&self) -> PathBuf {
        self.data_dir.join("endpoints.json")
    }
}

impl Settings {
    pub fn validate(&self) -> Result<(), String> {
        if self.regions == 0 || self.regions > REGION_NAMES.len() {
            return Err(format!("--regions {}: between 1 and {}", self.regions, REGION_NAMES.len()));
        }
        let top = u32::from(self.base_port) + u32::from(PORTS_PER_REGION) * self.regions as u32;
        if self.base_port < 1024 || top > u32::from(u16::MAX) {
            return Err(format!("--base-port {}: the playground needs ports {}..{top}, between 1024 and 65535", self.base_port, self.base_port));
        }
        Ok(())
    }

    pub fn read(data_dir: &Path) -> Result<Option<Settings>, String> {
        let f = Layout::settings_file(data_dir);
        match std::fs::read_to_string(&f) {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| format!("{}: {e}", f.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", f.display())),
        }
    }

    pub fn write(&self, data_dir: &Path) -> Result<(), String> {
        write_atomic(&Layout::settings_file(data_dir), &serde_json::to_string_pretty(self).expect("json"))
    }
}

/// Write to a temporary name, then rename: a reader never sees half a file.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_fixed_by_the_base_and_never_collide() {
        let s = Settings { version: 1, base_port: 7000, regions: 3, initialized: false, netns: false, insecure: false };
        let l = Layout::new(Path::new("/d"), s).unwrap();
        assert_eq!(l.regions[1].gateway.grpc, "127.0.0.1:7020");
        assert_eq!(l.regions[2].cell.nodes[2].metrics.as_deref(), Some("127.0.0.1:7052"));
        assert_eq!(l.registry_endpoints(Some("west")), "127.0.0.1:7022,127.0.0.1:7002,127.0.0.1:7042");
        let mut all = Vec::new();
        for r in &l.regions {
            all.extend([r.gateway.grpc.clone(), r.gateway.http.clone(), r.registry.client.clone(), r.registry.raft.clone()]);
            all.push(r.registry.metrics.clone().unwrap());
            for n in &r.cell.nodes {
                all.extend([n.client.clone(), n.raft.clone(), n.metrics.clone().unwrap()]);
            }
        }
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(Layout::new(Path::new("/d"), Settings { base_port: 65500, ..s }).is_err());
        assert!(Layout::new(Path::new("/d"), Settings { regions: 0, ..s }).is_err());
        assert!(l.netns.is_none());
    }

    #[test]
    fn netns_names_and_addresses_come_from_the_base_port() {
        let s = Settings { version: 1, base_port: 7000, regions: 3, initialized: false, netns: true, insecure: false };
        let l = Layout::new(Path::new("/d"), s).unwrap();
        let n = l.netns.as_ref().unwrap();
        assert_eq!((n.bridge.as_str(), n.bridge_ip.as_str()), ("hf7000br", "10.27.88.254"));
        let west = n.region("west").unwrap();
        assert_eq!(
            (west.netns.as_str(), west.host_veth.as_str(), west.peer_veth.as_str(), west.ip.as_str()),
            ("hf7000-west", "hf7000r1", "hf7000r1i", "10.27.88.2")
        );
        assert_eq!(l.regions[1].gateway.grpc, "10.27.88.2:7020");
        assert_eq!(l.regions[2].cell.nodes[0].raft, "10.27.88.3:7047");
        assert_eq!(l.registry_endpoints(Some("west")), "10.27.88.2:7022,10.27.88.1:7002,10.27.88.3:7042");
        let widest = NetnsLayout::new(65_000, 5);
        assert!(widest.regions.iter().all(|r| r.host_veth.len() <= 15 && r.peer_veth.len() <= 15) && widest.bridge.len() <= 15);
        // An old dev.json (before --netns) still loads.
        let old: Settings = serde_json::from_str(r#"{"version":1,"base_port":7000,"regions":3,"initialized":true}"#).unwrap();
        assert!(!old.netns);
    }
}
