//! Every metric name holdfast records, in one place. Names follow docs/design.md
//! ("Metrics"); the `holdfast_` ones are ours. Descriptions live with the recorder
//! (`holdfast-telemetry`).

// ---- the names of docs/design.md
pub const ACQUIRE_LATENCY: &str = "lock_acquire_latency_seconds";
pub const ACQUIRE_ERRORS: &str = "lock_acquire_errors_total";
pub const RENEW_FAILURES: &str = "lock_renew_failures_total";
pub const LEASE_EXPIRED_WHILE_HELD: &str = "lock_lease_expired_while_held_total";
pub const FENCING_REJECTIONS: &str = "lock_fencing_rejections_total";
pub const WAITERS: &str = "lock_waiters";
pub const ACQUIRE_WAIT: &str = "lock_acquire_wait_seconds";
pub const HOLD_TIME: &str = "lock_hold_time_seconds";
pub const AGE_MAX: &str = "lock_age_seconds_max";
pub const NAMESPACE_KEYS: &str = "lock_namespace_keys";
pub const ADMIN_BREAK: &str = "lock_admin_break_total";
// ---- Raft health of a cell or the registry, per node
pub const RAFT_HAS_LEADER: &str = "holdfast_raft_has_leader";
pub const RAFT_IS_LEADER: &str = "holdfast_raft_is_leader";
pub const RAFT_TERM: &str = "holdfast_raft_term";
pub const RAFT_COMMIT_INDEX: &str = "holdfast_raft_commit_index";
pub const RAFT_APPLIED_INDEX: &str = "holdfast_raft_applied_index";
pub const RAFT_FSYNC: &str = "holdfast_raft_fsync_seconds";
pub const RAFT_PROPOSE: &str = "holdfast_raft_propose_seconds";
pub const RAFT_STAGE: &str = "holdfast_raft_stage_seconds";
pub const RAFT_REPLICATE: &str = "holdfast_raft_replicate_seconds";
pub const RAFT_FOLLOWER_APPEND: &str = "holdfast_raft_follower_append_seconds";
pub const RAFT_DISK_REFUSED: &str = "holdfast_raft_disk_refused_total";
// ---- every process with a metrics port
pub const BUILD_INFO: &str = "holdfast_build_info";
// ---- certificates (every process with TLS material)
pub const CERT_NOT_AFTER: &str = "holdfast_certificate_not_after_seconds";
// ---- ownership
pub const SHARD_EPOCH: &str = "holdfast_shard_epoch";
pub const OWNERSHIP_LEASE_REMAINING: &str = "holdfast_ownership_lease_remaining_seconds";
// ---- registry
pub const OWNERSHIP_LEASE_LAPSES: &str = "holdfast_ownership_lease_lapses_total";
pub const AUTO_FAILOVER_MOVES: &str = "holdfast_auto_failover_moves_total";
pub const MOVES_IN_PROGRESS: &str = "holdfast_registry_moves_in_progress";
pub const MOVE_AGE_MAX: &str = "holdfast_registry_move_age_seconds_max";
// ---- sessions (cell)
pub const SESSIONS_EXPIRED: &str = "holdfast_sessions_expired_total";
pub const CHECKPOINT_SESSIONS: &str = "holdfast_checkpoint_sessions";
// ---- gateway
pub const GATEWAY_STALE_ROUTES: &str = "holdfast_gateway_stale_routes_total";
pub const GATEWAY_UNFENCED_GRANTS: &str = "holdfast_gateway_unfenced_grants_total";
pub const GATEWAY_RATE_LIMITED: &str = "holdfast_gateway_rate_limited_total";
pub const GATEWAY_REQUESTS: &str = "holdfast_gateway_requests_total";
pub const GATEWAY_REQUEST_DURATION: &str = "holdfast_gateway_request_duration_seconds";
pub const GATEWAY_UPSTREAM_DURATION: &str = "holdfast_gateway_upstream_duration_seconds";
pub const GATEWAY_FAIL_CLOSED: &str = "holdfast_gateway_fail_closed_refusals_total";
pub const GATEWAY_PLACEMENT_REFRESHES: &str = "holdfast_gateway_placement_refreshes_total";
pub const GATEWAY_PLACEMENT_AGE: &str = "holdfast_gateway_placement_age_seconds";
pub const GATEWAY_OWNER_LOOKUPS: &str = "holdfast_gateway_owner_lookups_total";
// ---- safety signals derived at the edges (docs/observability.md says how)
pub const HOLDER_OVERLAP: &str = "lock_holder_overlap_seconds";
pub const HELD_WITHOUT_PROGRESS: &str = "lock_held_without_progress_seconds";
