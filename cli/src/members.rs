//! `holdfast cell member add|remove|replace|list`: changing the voters of a running
//! cell (or of the registry) through RaftAdmin, the way etcd's `member add` does it,
//! learner first: a new node is added as a learner and made a voter only once it has
//! caught up with the leader's log, so a slow new node never counts towards a quorum
//! it cannot serve. Every change is one joint-consensus step to the complete new voter
//! set, sent to the leader (found from any member), and retried at the new leader if
//! leadership moves; sending the same final set again is harmless. With `--cell`, the
//! registry's record of the cell is updated afterwards, so gateways learn the members.

use crate::ops::{emit, Gw};
use crate::remote::{raft_admin, raft_metrics};
use crate::serve::parse_member;
use clap::{Args, Subcommand};
use holdfast_proto::raft::v1 as rpb;
use holdfast_rpc::Transport;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum MemberCmd {
    /// Add a voter: the new node (already running, with an empty data directory) joins
    /// as a learner, catches up, then becomes a voter.
    ///
    /// Example: holdfast cell member add --raft-endpoint east-1-0.example:7301 \
    ///            --member 4=east-1-3.example:7301,east-1-3.example:7300 --cell east-1 --region east
    Add {
        #[command(flatten)]
        group: Group,
        /// ID=RAFT_ADDR,CLIENT_ADDR of the new node; its id never used before in the group.
        #[arg(long)]
        member: String,
    },
    /// Remove a voter (it stops receiving the log; stop its process afterwards). A
    /// group is never shrunk below 3 voters without --force.
    ///
    /// Example: holdfast cell member remove --raft-endpoint east-1-0.example:7301 --node-id 2 --cell east-1 --region east
    Remove {
        #[command(flatten)]
        group: Group,
        #[arg(long)]
        node_id: u64,
        /// Allow fewer than 3 voters (a group of 2 survives no failure).
        #[arg(long)]
        force: bool,
    },
    /// Replace a voter by a new node, in one step: the new node catches up as a
    /// learner, then the voter set changes from the old to the new one (the old node,
    /// dead or alive, leaves). With the old node's own id (a node that lost its volume
    /// and came back empty under its id): it is removed first, then joins again on its
    /// new disk (docs/runbooks/lost-volume.md).
    ///
    /// Example: holdfast cell member replace --raft-endpoint east-1-0.example:7301 --old 3 \
    ///            --member 4=east-1-3.example:7301,east-1-3.example:7300 --cell east-1 --region east
    Replace {
        #[command(flatten)]
        group: Group,
        /// The voter leaving.
        #[arg(long)]
        old: u64,
        /// ID=RAFT_ADDR,CLIENT_ADDR of the node taking its place.
        #[arg(long)]
        member: String,
    },
    /// The group's members: voters and learners, the leader, each node's addresses.
    ///
    /// Example: holdfast cell member list --raft-endpoint east-1-0.example:7301
    List {
        #[command(flatten)]
        group: Group,
    },
}

/// Which group, and what to tell the registry.
#[derive(Debug, Args)]
pub struct Group {
    /// Raft addresses of members of the group, comma-separated: any that answer (the
    /// leader is found from them).
    #[arg(long = "raft-endpoint", env = "HOLDFAST_RAFT_ENDPOINT")]
    raft_endpoints: String,
    /// The cell's name: after the change, its record in the registry is updated with
    /// the new voters (through --endpoints). Leave out for the registry's own group or
    /// a cell run without a registry.
    #[arg(long, requires = "region")]
    cell: Option<String>,
    #[arg(long)]
    region: Option<String>,
    #[command(flatten)]
    gw: Gw,
}

/// How long a membership step may take (a learner catching up a large log).
const STEP: Duration = Duration::from_secs(120);

pub async fn run(cmd: MemberCmd) -> Result<(), String> {
    let group = match &cmd {
        MemberCmd::Add { group, .. } | MemberCmd::Remove { group, .. } | MemberCmd::Replace { group, .. } | MemberCmd::List { group } => group,
    };
    let t = crate::remote::transport(&group.gw.tls)?;
    let endpoints = crate::remote::endpoint_list(&group.raft_endpoints)?;
    let (leader, m) = find_leader(t, &endpoints).await?;
    let voters = voters(&m);
    let target: BTreeSet<u64> = match &cmd {
        MemberCmd::List { .. } => {
            emit(group.gw.output, &members_view(&m));
            return Ok(());
        }
        MemberCmd::Add { member, .. } => {
            let new = parse_member(member)?;
            if m.membership.as_ref().is_some_and(|ms| ms.nodes.contains_key(&new.node_id)) && !voters.contains(&new.node_id) {
                eprintln!("node {} is a learner already; making it a voter", new.node_id);
            } else if voters.contains(&new.node_id) {
                return Err(format!("node {} is a voter already", new.node_id));
            }
            add_learner(t, &endpoints, &leader, new.clone()).await?;
            voters.iter().copied().chain([new.node_id]).collect()
        }
        MemberCmd::Remove { node_id, force, .. } => {
            if !voters.contains(node_id) {
                return Err(format!("node {node_id} is not a voter (voters: {voters:?})"));
            }
            if voters.len() <= 3 && !force {
                return Err(format!(
                    "removing node {node_id} leaves {} voters, which survive no failure; add its replacement first (cell member replace), or --force",
                    voters.len() - 1
                ));
            }
            voters.iter().copied().filter(|v| v != node_id).collect()
        }
        MemberCmd::Replace { old, member, .. } => {
            let new = parse_member(member)?;
            if !voters.contains(old) {
                return Err(format!("node {old} is not a voter (voters: {voters:?})"));
            }
            if new.node_id == *old {
                // The same id on a new disk (a recreated volume): the group refuses it
                // as the member it knew (docs/runbooks/lost-volume.md) until it has left
                // and joined again, which records its new disk.
                let without: BTreeSet<u64> = voters.iter().copied().filter(|v| v != old).collect();
                eprintln!("node {old} comes back on a new disk: removing it, then adding it again ({voters:?} -> {without:?})");
                change_voters(t, &endpoints, &without).await?;
                let leader = find_leader(t, &endpoints).await?.0;
                add_learner(t, &endpoints, &leader, new.clone()).await?;
                voters.clone()
            } else {
                if voters.contains(&new.node_id) {
                    return Err(format!("node {} is a voter already: a replacement needs a new id, or the id it replaces", new.node_id));
                }
                add_learner(t, &endpoints, &leader, new.clone()).await?;
                voters.iter().copied().filter(|v| v != old).chain([new.node_id]).collect()
            }
        }
    };
    eprintln!("changing voters {voters:?} -> {target:?}");
    let after = change_voters(t, &endpoints, &target).await?;
    if let (Some(cell), Some(region)) = (&group.cell, &group.region) {
        let members = after
            .nodes
            .iter()
            .filter(|(id, _)| target.contains(id))
            .map(|(id, n)| holdfast_proto::registry::v1::CellMember { node_id: *id, raft_addr: n.raft_addr.clone(), client_addr: n.client_addr.clone() })
            .collect();
        crate::ops::record_cell(&group.gw, cell.clone(), region.clone(), members).await?;
    } else {
        let m = find_leader(t, &endpoints).await?.1;
        emit(group.gw.output, &members_view(&m));
    }
    Ok(())
}

fn voters(m: &rpb::MetricsResponse) -> BTreeSet<u64> {
    // Outside a change there is one config; during one, both count (joint consensus).
    m.membership.as_ref().map(|ms| ms.configs.iter().flat_map(|c| c.node_ids.iter().copied()).collect()).unwrap_or_default()
}

fn members_view(m: &rpb::MetricsResponse) -> Value {
    let voters = voters(m);
    let rows: Vec<Value> = m
        .membership
        .as_ref()
        .map(|ms| {
            ms.nodes
                .iter()
                .map(|(id, n)| {
                    json!({
                        "node_id": id,
                        "role": if voters.contains(id) { "voter" } else { "learner" },
                        "leader": m.has_leader && m.leader_id == *id,
                        "raft": n.raft_addr,
                        "client": n.client_addr,
                        // The disk the group knows it by (docs/runbooks/lost-volume.md); "" if not recorded.
                        "disk": if n.disk == 0 { String::new() } else { format!("{:016x}", n.disk) },
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(rows)
}

/// The leader's Raft address and its metrics, asked of `endpoints` in turn; a member
/// that knows the leader names it, and the leader's own metrics are read.
async fn find_leader(t: &Transport, endpoints: &[String]) -> Result<(String, rpb::MetricsResponse), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut last = String::from("no member answered");
    loop {
        for e in endpoints {
            let m = match raft_metrics(t, e).await {
                Ok(m) => m,
                Err(err) => {
                    last = format!("{e}: {err}");
                    continue;
                }
            };
            if !m.has_leader {
                last = format!("{e}: no leader known");
                continue;
            }
            if m.node_id == m.leader_id {
                return Ok((e.clone(), m));
            }
            let Some(addr) = m.membership.as_ref().and_then(|ms| ms.nodes.get(&m.leader_id)).map(|n| n.raft_addr.clone()) else {
                last = format!("{e}: the leader {} is not in its membership", m.leader_id);
                continue;
            };
            match raft_metrics(t, &addr).await {
                Ok(lm) if lm.has_leader && lm.leader_id == lm.node_id => return Ok((addr, lm)),
                Ok(_) => last = format!("{addr}: not the leader (any more)"),
                Err(err) => last = format!("{addr}: {err}"),
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("no leader found within 15 s ({last})"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Adds `learner` and waits until it has caught up (the leader answers then).
async fn add_learner(t: &Transport, endpoints: &[String], leader: &str, learner: rpb::Member) -> Result<(), String> {
    eprintln!("adding node {} as a learner; waiting for it to catch up", learner.node_id);
    let mut at = leader.to_owned();
    for _ in 0..5 {
        let mut c = raft_admin(t, &at).await?;
        let req = rpb::AddLearnerRequest { learner: Some(learner.clone()), blocking: true };
        match tokio::time::timeout(STEP, c.add_learner(req)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(s)) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::NotLeader) => at = find_leader(t, endpoints).await?.0,
            Ok(Err(s)) => return Err(format!("adding node {} refused: {}", learner.node_id, s.message())),
            Err(_) => {
                return Err(format!(
                    "node {} did not catch up within {STEP:?}: is it running, with an empty data directory, at {}?",
                    learner.node_id, learner.raft_addr
                ))
            }
        }
    }
    Err("leadership kept moving while adding the learner".into())
}

/// Changes the voters to `target` at the leader; returns the membership after.
async fn change_voters(t: &Transport, endpoints: &[String], target: &BTreeSet<u64>) -> Result<rpb::Membership, String> {
    for _ in 0..5 {
        let (leader, _) = find_leader(t, endpoints).await?;
        let mut c = raft_admin(t, &leader).await?;
        let req = rpb::ChangeMembershipRequest { voters: target.iter().copied().collect(), keep_removed_as_learners: false };
        match tokio::time::timeout(STEP, c.change_membership(req)).await {
            Ok(Ok(r)) => return r.into_inner().membership.ok_or_else(|| "the leader answered no membership".to_owned()),
            Ok(Err(s)) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::NotLeader) => continue,
            Ok(Err(s)) => return Err(format!("membership change refused: {}", s.message())),
            Err(_) => return Err(format!("the membership change did not commit within {STEP:?}")),
        }
    }
    Err("leadership kept moving while changing the voters".into())
}
