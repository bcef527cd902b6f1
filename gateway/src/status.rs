//! `/status`: one server-rendered HTML page for the person watching a deployment —
//! during an evacuation, at 3 AM — that refreshes itself every few seconds and needs
//! no build step, no script and no external asset. Read fresh on every load: regions,
//! cells and their members, shard ownership and moves from the registry; each cell's
//! leader, term, commit and applied index, sessions, most contended locks and how long
//! its ownership lease has left from the cell's leader (`CellAdmin.Status`); the
//! registry's leader and quorum from each registry voter (`RaftStatus`, answered
//! without a quorum). What cannot be read is shown as such, never left out: a cell
//! that does not answer is marked unreachable, and with the registry away the page
//! says so and shows each cell's lease (docs/runbooks/registry-unreachable.md).
//!
//! Like `/metrics`, it is served on the gateway's HTTP port to anyone who can reach
//! it, and shows names (namespaces, shards, locks), no lock values and no sessions'
//! owners (docs/observability.md, "Status page").

use crate::gateway::Gateway;
use axum::extract::State;
use axum::response::Html;
use futures_util::future::join_all;
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as lpb;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::{Budget, Channel};
use maud::{html, Markup, DOCTYPE};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the page reloads itself, seconds.
const REFRESH_S: u32 = 2;
/// How long one read for the page may take: a slow cell is shown as such.
const READ_BUDGET: Duration = Duration::from_millis(1500);
/// Shards listed in the ownership map; the rest are counted.
const MAX_SHARDS_SHOWN: usize = 500;
/// A registry leader acknowledged by a quorum within this long has its quorum.
const QUORUM_FRESH_MS: u64 = 3000;
/// A cell lease with less than this left is shown as a warning.
const LEASE_WARN: Duration = Duration::from_secs(300);

/// What the page shows, read once per load.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub gateway_region: String,
    pub regions: Vec<rpb::Region>,
    pub cells: Vec<rpb::Cell>,
    pub shards: Vec<rpb::ShardOwner>,
    pub namespaces: Vec<apb::NamespaceConfig>,
    /// By cell name: its leader's status, or why it could not be read.
    pub cell_status: BTreeMap<String, Result<apb::CellStatusResponse, String>>,
    /// Each registry member (by address): its view of the registry's Raft group, or
    /// why it could not be read.
    pub registry: Vec<(String, Result<raftpb::MetricsResponse, String>)>,
    /// Registry reads that failed.
    pub errors: Vec<String>,
}

/// The registry's health as the page sums it up, from its members' views.
#[derive(Debug, PartialEq, Eq)]
pub enum RegistryHealth {
    /// A leader a quorum acknowledged within [`QUORUM_FRESH_MS`].
    Quorum { leader: u64, acked_ms: u64 },
    /// A member says it leads, but no quorum acknowledged it lately.
    NoQuorum { leader: u64, acked_ms: Option<u64> },
    /// No member that answered leads (or none answered).
    NoLeader,
}

pub fn registry_health(views: &[(String, Result<raftpb::MetricsResponse, String>)]) -> RegistryHealth {
    let leaders = views.iter().filter_map(|(_, v)| v.as_ref().ok()).filter(|m| m.server_state == "Leader");
    // Two members claiming to lead (one deposed and not yet told): the newer term speaks.
    match leaders.max_by_key(|m| m.current_term) {
        None => RegistryHealth::NoLeader,
        Some(m) => match m.millis_since_quorum_ack {
            Some(acked_ms) if acked_ms <= QUORUM_FRESH_MS => RegistryHealth::Quorum { leader: m.node_id, acked_ms },
            acked_ms => RegistryHealth::NoQuorum { leader: m.node_id, acked_ms },
        },
    }
}

/// "29 min 58 s", "4.2 s".
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

async fn registry_read<T, F, Fut>(gw: &Gateway, what: &str, errors: &mut Vec<String>, f: F) -> Option<T>
where
    F: Fn(RegistryServiceClient<Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    match gw.placement.registry().call(Budget::per_attempt(READ_BUDGET), |ch| f(RegistryServiceClient::new(ch))).await {
        Ok(c) => Some(c.value),
        Err(e) => {
            errors.push(format!("{what}: {e}"));
            None
        }
    }
}

/// Reads everything the page shows.
pub async fn snapshot(gw: &Gateway, gateway_region: &str) -> Snapshot {
    let mut s = Snapshot { gateway_region: gateway_region.to_owned(), ..Default::default() };
    let mut errors = Vec::new();
    let regions = registry_read(gw, "regions", &mut errors, |mut c| async move { c.list_regions(rpb::ListRegionsRequest {}).await }).await;
    let cells = registry_read(gw, "cells", &mut errors, |mut c| async move { c.list_cells(rpb::ListCellsRequest { region: String::new() }).await }).await;
    let shards = registry_read(gw, "shards", &mut errors, |mut c| async move { c.list_shards(rpb::ListShardsRequest::default()).await }).await;
    let namespaces = registry_read(gw, "namespaces", &mut errors, |mut c| async move { c.list_namespaces(rpb::ListNamespacesRequest {}).await }).await;
    s.regions = regions.map(|r| r.regions).unwrap_or_default();
    s.cells = cells.map(|r| r.cells).unwrap_or_default();
    s.shards = shards.map(|r| r.shards).unwrap_or_default();
    s.namespaces = namespaces.map(|r| r.configs).unwrap_or_default();
    s.errors = errors;
    let reads = s.cells.iter().map(|c| async move {
        let answer = match gw.placement.cell(&c.cell) {
            None => Err("this gateway does not know its members yet".to_owned()),
            Some(up) => up
                .call(Budget::per_attempt(READ_BUDGET), |ch| async move { CellAdminClient::new(ch).status(apb::CellStatusRequest {}).await })
                .await
                .map(|c| c.value)
                .map_err(|e| e.to_string()),
        };
        (c.cell.clone(), answer)
    });
    // Each voter directly, not through the leader: the point is to see the registry
    // while it has no leader or no quorum. Read beside the cells, so an unreachable
    // voter and an unreachable cell cost one read budget, not two.
    let registry = gw.placement.registry();
    let views = registry.members().into_iter().map(|addr| async move {
        let answer = match registry.transport().channel(&addr) {
            Err(e) => Err(e.to_string()),
            Ok(ch) => match tokio::time::timeout(READ_BUDGET, RegistryServiceClient::new(ch).raft_status(rpb::RaftStatusRequest {})).await {
                Ok(Ok(r)) => r.into_inner().raft.ok_or_else(|| "an empty answer".to_owned()),
                Ok(Err(st)) => Err(st.message().to_owned()),
                Err(_) => Err(format!("no answer within {READ_BUDGET:?}")),
            },
        };
        (addr, answer)
    });
    let (cells, views) = tokio::join!(join_all(reads), join_all(views));
    s.cell_status = cells.into_iter().collect();
    s.registry = views;
    s
}

fn region_state(n: i32) -> &'static str {
    match rpb::RegionState::try_from(n) {
        Ok(rpb::RegionState::Active) => "active",
        Ok(rpb::RegionState::Draining) => "draining",
        Ok(rpb::RegionState::Evacuated) => "evacuated",
        _ => "unknown",
    }
}

fn intent(n: i32) -> String {
    lpb::Intent::try_from(n).map_or("unknown".into(), |i| i.as_str_name().trim_start_matches("INTENT_").to_lowercase())
}

fn posture(n: i32) -> String {
    lpb::Posture::try_from(n).map_or("unknown".into(), |p| p.as_str_name().trim_start_matches("POSTURE_").to_lowercase().replace('_', "-"))
}

fn moving(s: &rpb::ShardOwner) -> bool {
    s.state == rpb::ShardState::Moving as i32
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
th{background:#f3f3f3}.bad{color:#b00020;font-weight:bold}.ok{color:#08660b}.warn{color:#9a6700}\
.muted{color:#777}";

/// The page, from what was read.
pub fn render(s: &Snapshot) -> Markup {
    let shards_of = |cell: &str| s.shards.iter().filter(|o| o.cell == cell).count();
    let moves: Vec<&rpb::ShardOwner> = s.shards.iter().filter(|o| moving(o)).collect();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(REFRESH_S);
                title { "holdfast status" }
                style { (STYLE) }
            }
            body {
                h1 { "holdfast status" }
                p.muted {
                    "Gateway of region " (s.gateway_region) "; read "
                    (s.regions.len()) " regions, " (s.cells.len()) " cells, " (s.shards.len()) " shards; this page reloads every "
                    (REFRESH_S) " s."
                }
                @for e in &s.errors { p.bad { "registry read failed: " (e) } }

                h2 id="registry" { "Registry" }
                @match registry_health(&s.registry) {
                    RegistryHealth::Quorum { leader, acked_ms } => {
                        p.ok id="registry-health" { "leader node " (leader) ", quorum acknowledged it " (acked_ms) " ms ago" }
                    }
                    RegistryHealth::NoQuorum { leader, acked_ms } => {
                        p.bad id="registry-health" {
                            "no quorum: leader node " (leader) " was last acknowledged by a quorum "
                            (acked_ms.map_or("never".to_owned(), |ms| format!("{} ago", span(Duration::from_millis(ms)))))
                            ". Cells serve their shards until their leases run out (lease left, below); registry writes are refused."
                        }
                    }
                    RegistryHealth::NoLeader => {
                        p.bad id="registry-health" {
                            "no leader reachable: the registry is away. Cells serve their shards until their leases run out (lease left, below); registry writes are refused."
                        }
                    }
                }
                table {
                    tr { th { "member" } th { "node" } th { "state" } th { "term" } th { "follows" } th { "commit" } th { "applied" } }
                    @for (addr, view) in &s.registry {
                        tr {
                            td { (addr) }
                            @match view {
                                Ok(m) => {
                                    td { (m.node_id) }
                                    td class=(if m.server_state == "Leader" || m.server_state == "Follower" { "ok" } else { "warn" }) { (m.server_state.to_lowercase()) }
                                    td { (m.current_term) }
                                    td { (if m.has_leader { format!("node {}", m.leader_id) } else { "no leader".to_owned() }) }
                                    td { (m.commit_index) }
                                    td { (m.last_applied_index) }
                                }
                                Err(e) => { td.bad colspan="6" { "unreachable: " (e) } }
                            }
                        }
                    }
                }

                h2 id="regions" { "Regions" }
                table {
                    tr { th { "region" } th { "state" } th { "cells" } th { "shards homed" } }
                    @for r in &s.regions {
                        tr {
                            td { (r.region) }
                            td class=(if r.state == rpb::RegionState::Active as i32 { "ok" } else { "warn" }) { (region_state(r.state)) }
                            td { (s.cells.iter().filter(|c| c.region == r.region).count()) }
                            td { (s.shards.iter().filter(|o| o.region == r.region).count()) }
                        }
                    }
                }

                h2 id="cells" { "Cells" }
                table {
                    tr { th { "cell" } th { "region" } th { "members" } th { "health" } th { "leader" } th { "term" } th { "commit" } th { "applied" } th { "shards" } th { "sessions" } th { "lease left" } }
                    @for c in &s.cells {
                        tr {
                            td { (c.cell) }
                            td { (c.region) }
                            td { (c.members.len()) }
                            @match s.cell_status.get(&c.cell) {
                                Some(Ok(st)) => {
                                    td.ok { "serving" }
                                    td { "node " (st.leader_id) }
                                    td { (st.term) }
                                    td { (st.commit_index) }
                                    td { (st.applied_index) }
                                }
                                Some(Err(e)) => { td.bad colspan="5" { "unreachable: " (e) } }
                                None => { td.muted colspan="5" { "not read" } }
                            }
                            td { (shards_of(&c.cell)) }
                            td { (s.cell_status.get(&c.cell).and_then(|r| r.as_ref().ok()).map_or(String::from("-"), |st| st.sessions.to_string())) }
                            @match s.cell_status.get(&c.cell).and_then(|r| r.as_ref().ok()).map(|st| st.ownership_lease_left_ms) {
                                Some(Some(ms)) => {
                                    @let left = Duration::from_millis(ms);
                                    @let class = if left.is_zero() { "lease bad" } else if left < LEASE_WARN { "lease warn" } else { "lease ok" };
                                    td class=(class) { (if left.is_zero() { "none: not granting".to_owned() } else { span(left) }) }
                                }
                                Some(None) => { td.muted { "no registry" } }
                                None => { td.muted { "-" } }
                            }
                        }
                    }
                }

                h2 id="moves" { "Moves in progress" }
                @if moves.is_empty() {
                    p.muted { "none" }
                } @else {
                    table {
                        tr { th { "shard" } th { "from" } th { "to" } th { "kind" } th { "epoch" } th { "source sealed" } }
                        @for m in &moves {
                            tr {
                                td { (m.ns) "/" (m.shard) }
                                td { (m.cell) }
                                td { (m.to_cell) }
                                td { (if m.planned { "planned (drain, seal)" } else { "unplanned (lease runs out)" }) }
                                td { (m.epoch) }
                                td { (if m.sealed { "yes" } else { "no" }) }
                            }
                        }
                    }
                }

                h2 id="shards" { "Shard ownership" }
                table {
                    tr { th { "namespace" } th { "shard" } th { "region" } th { "cell" } th { "epoch" } th { "state" } }
                    @for o in s.shards.iter().take(MAX_SHARDS_SHOWN) {
                        tr.shard data-shard=(format!("{}/{}", o.ns, o.shard)) {
                            td { (o.ns) }
                            td { (o.shard) }
                            td { (o.region) }
                            td.owner { (o.cell) }
                            td.epoch { (o.epoch) }
                            td class=(if moving(o) { "warn" } else { "ok" }) { (if moving(o) { format!("moving to {}", o.to_cell) } else { "active".to_owned() }) }
                        }
                    }
                }
                @if s.shards.len() > MAX_SHARDS_SHOWN { p.muted { "… and " (s.shards.len() - MAX_SHARDS_SHOWN) " more (holdfast shard list)" } }

                h2 id="namespaces" { "Namespaces" }
                table {
                    tr { th { "namespace" } th { "owner" } th { "intent" } th { "posture" } th { "ttl (ms)" } th { "max hold (ms)" } }
                    @for n in &s.namespaces {
                        tr {
                            td { (n.name) }
                            td { (n.owner) }
                            td { (intent(n.intent)) }
                            td { (posture(n.posture)) }
                            td { (n.ttl_min_ms) "–" (n.ttl_max_ms) }
                            td { (if n.max_hold_ms == 0 { "none".to_owned() } else { n.max_hold_ms.to_string() }) }
                        }
                    }
                }

                h2 id="contended" { "Most contended locks" }
                @let contended: Vec<(&String, &apb::ContendedLock)> = {
                    let mut v: Vec<(&String, &apb::ContendedLock)> =
                        s.cell_status.iter().filter_map(|(c, r)| r.as_ref().ok().map(|st| (c, st))).flat_map(|(c, st)| st.contended.iter().map(move |l| (c, l))).collect();
                    v.sort_by_key(|l| std::cmp::Reverse(l.1.waiters));
                    v.truncate(10);
                    v
                };
                @if contended.is_empty() {
                    p.muted { "no lock has waiters" }
                } @else {
                    table {
                        tr { th { "cell" } th { "namespace" } th { "lock" } th { "waiters" } }
                        @for (c, l) in &contended {
                            tr { td { (c) } td { (l.ns) } td { (l.name) } td { (l.waiters) } }
                        }
                    }
                }
            }
        }
    }
}

/// Loads within this long of the last read share it: one page fans out to the registry
/// and every cell, and callers must not be able to multiply that load.
const REUSE_FOR: Duration = Duration::from_secs(1);

/// The last page rendered, reused for [`REUSE_FOR`]; loads that arrive while a read is
/// in flight wait for it instead of starting their own.
#[derive(Debug, Default)]
pub struct Reuse {
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<String>)>>,
}

impl Reuse {
    /// The page rendered less than [`REUSE_FOR`] ago, else a new one from `read`.
    pub async fn get<F, Fut>(&self, read: F) -> Arc<String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = String>,
    {
        let mut last = self.last.lock().await;
        if let Some((_, page)) = last.as_ref().filter(|(at, _)| at.elapsed() < REUSE_FOR) {
            return page.clone();
        }
        let page = Arc::new(read().await);
        *last = Some((tokio::time::Instant::now(), page.clone()));
        page
    }
}

/// What `GET /status` needs: the gateway, its region, the last page.
#[derive(Debug, Clone)]
pub struct StatusPage {
    gw: Gateway,
    region: String,
    reuse: Arc<Reuse>,
}

impl StatusPage {
    pub fn new(gw: Gateway, region: String) -> StatusPage {
        StatusPage { gw, region, reuse: Arc::default() }
    }
}

/// The handler: `GET /status`.
pub async fn page(State(p): State<StatusPage>) -> Html<String> {
    let page = p.reuse.get(|| async { render(&snapshot(&p.gw, &p.region).await).into_string() }).await;
    Html(page.as_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_owners_moves_and_unreachable_cells() {
        let s = Snapshot {
            gateway_region: "east".into(),
            regions: vec![rpb::Region { region: "east".into(), state: rpb::RegionState::Draining as i32 }],
            cells: vec![
                rpb::Cell { cell: "east-1".into(), region: "east".into(), members: vec![] },
                rpb::Cell { cell: "west-1".into(), region: "west".into(), members: vec![] },
            ],
            shards: vec![rpb::ShardOwner {
                ns: "pay".into(),
                shard: "s1".into(),
                region: "east".into(),
                cell: "east-1".into(),
                epoch: 3,
                state: rpb::ShardState::Moving as i32,
                to_cell: "west-1".into(),
                planned: true,
                sealed: false,
            }],
            cell_status: [
                (
                    "east-1".to_owned(),
                    Ok(apb::CellStatusResponse { leader_id: 2, term: 7, commit_index: 41, ownership_lease_left_ms: Some(1_798_000), ..Default::default() }),
                ),
                ("west-1".to_owned(), Err("connection refused".to_owned())),
            ]
            .into_iter()
            .collect(),
            registry: vec![
                ("reg-east:7200".into(), Ok(voter(1, "Follower", 4, Some(2), None))),
                ("reg-west:7200".into(), Ok(voter(2, "Leader", 4, Some(2), Some(40)))),
                ("reg-south:7200".into(), Err("connection refused".into())),
            ],
            ..Default::default()
        };
        let page = render(&s).into_string();
        assert!(page.contains("leader node 2, quorum acknowledged it 40 ms ago"), "{page}");
        assert!(page.contains(r#"<td class="lease ok">29 min 58 s</td>"#), "{page}");
        assert!(page.contains(r#"<meta http-equiv="refresh" content="2">"#), "{page}");
        assert!(page.contains("draining"), "{page}");
        assert!(page.contains(r#"data-shard="pay/s1""#) && page.contains(r#"<td class="epoch">3</td>"#), "{page}");
        assert!(page.contains("moving to west-1") && page.contains("planned (drain, seal)"), "{page}");
        assert!(page.contains("node 2") && page.contains("unreachable: connection refused"), "{page}");
        assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"), "no scripts, no external assets: {page}");
    }

    fn voter(id: u64, state: &str, term: u64, leader: Option<u64>, acked_ms: Option<u64>) -> raftpb::MetricsResponse {
        raftpb::MetricsResponse {
            node_id: id,
            server_state: state.into(),
            current_term: term,
            has_leader: leader.is_some(),
            leader_id: leader.unwrap_or_default(),
            millis_since_quorum_ack: acked_ms,
            ..Default::default()
        }
    }

    #[test]
    fn the_registry_is_summed_up_from_its_voters_views() {
        let view = |v: Vec<Result<raftpb::MetricsResponse, String>>| v.into_iter().enumerate().map(|(i, r)| (format!("reg-{i}"), r)).collect::<Vec<_>>();
        let down = || Err("connection refused".to_owned());
        assert_eq!(registry_health(&view(vec![down(), down(), down()])), RegistryHealth::NoLeader);
        assert_eq!(registry_health(&view(vec![Ok(voter(1, "Candidate", 9, None, None)), down()])), RegistryHealth::NoLeader);
        // A leader cut off from its followers still says it leads: no quorum acked it.
        assert_eq!(
            registry_health(&view(vec![Ok(voter(1, "Leader", 4, Some(1), Some(12_000))), down(), down()])),
            RegistryHealth::NoQuorum { leader: 1, acked_ms: Some(12_000) }
        );
        // A deposed leader not told yet, beside the new one: the newer term speaks.
        assert_eq!(
            registry_health(&view(vec![Ok(voter(1, "Leader", 4, Some(1), Some(9_000))), Ok(voter(2, "Leader", 5, Some(2), Some(30)))])),
            RegistryHealth::Quorum { leader: 2, acked_ms: 30 }
        );
        let page = render(&Snapshot { registry: view(vec![down(), down()]), ..Default::default() }).into_string();
        assert!(page.contains("no leader reachable: the registry is away"), "{page}");
        let lapsed = Snapshot {
            cells: vec![rpb::Cell { cell: "east-1".into(), region: "east".into(), members: vec![] }],
            cell_status: [("east-1".to_owned(), Ok(apb::CellStatusResponse { ownership_lease_left_ms: Some(0), ..Default::default() }))].into_iter().collect(),
            ..Default::default()
        };
        assert!(render(&lapsed).into_string().contains(r#"<td class="lease bad">none: not granting</td>"#));
    }

    #[tokio::test]
    async fn loads_within_a_second_share_one_read() {
        let reuse = Reuse::default();
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = || async {
            let n = reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            format!("page {n}")
        };
        assert_eq!(*reuse.get(read).await, "page 1");
        assert_eq!(*reuse.get(read).await, "page 1", "reused within the second");
        tokio::time::sleep(REUSE_FOR + Duration::from_millis(50)).await;
        assert_eq!(*reuse.get(read).await, "page 2", "read again after it");
    }

    #[test]
    fn names_are_escaped() {
        let s = Snapshot { namespaces: vec![apb::NamespaceConfig { name: "<b>x</b>".into(), ..Default::default() }], ..Default::default() };
        assert!(render(&s).into_string().contains("&lt;b&gt;x&lt;/b&gt;"));
    }
}
