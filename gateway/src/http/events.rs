//! The HTTP event streams (Server-Sent Events): a shard's ownership changes and a
//! lock's events, each event's `id:` its revision, resumed by `Last-Event-ID`.

use super::*;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use holdfast_proto::json::{EventView, OwnershipEventView};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;
use tonic::Streaming;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EventsQuery {
    /// Events after this revision. A `Last-Event-ID` header (what an `EventSource`
    /// sends when it reconnects) takes its place.
    from_revision: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct OwnershipEventsQuery {
    /// Only this namespace's shards (a reader of it); absent: every namespace
    /// (operator).
    #[serde(default)]
    ns: String,
    /// Events after this revision (0: every retained event). A `Last-Event-ID`
    /// header takes its place.
    from_revision: Option<u64>,
}

/// Where a stream resumes: the `Last-Event-ID` a reconnecting `EventSource` sends, else
/// the query's revision, else `default`.
fn resume_from(headers: &HeaderMap, query: Option<u64>, default: u64) -> Result<u64, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => v.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| bad("Last-Event-ID must be a revision (a decimal integer)")),
        None => Ok(query.unwrap_or(default)),
    }
}

/// An upstream watch as Server-Sent Events: each message becomes the events `each`
/// makes of it; an error ends the stream with an `error` event carrying the error
/// answer ([`ErrorBody`]); the gateway stopping ends it too. Comments keep idle
/// connections open through proxies. `slot` is held while the stream lasts.
fn sse<T: Send + 'static>(
    gw: &Gateway,
    upstream: Streaming<T>,
    slot: OwnedSemaphorePermit,
    each: impl FnMut(T) -> Vec<Event> + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = futures_util::stream::unfold(Some((upstream, each)), |state| async move {
        let (mut upstream, mut each) = state?;
        match upstream.message().await {
            Ok(Some(m)) => Some((futures_util::stream::iter(each(m)), Some((upstream, each)))),
            Ok(None) => None,
            Err(s) => Some((futures_util::stream::iter(vec![error_event(&s)]), None)),
        }
    })
    .flatten()
    .take_until(gw.stopping())
    .map(move |e| {
        let _held = &slot;
        Ok(e)
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn error_event(s: &Status) -> Event {
    let code = code_of(s).unwrap_or(ErrorCode::Unavailable);
    let body = ErrorBody { code, message: s.message().to_owned(), retryable: code.is_retryable(), retry_after_ms: retry_after_of(s) };
    Event::default().event("error").json_data(body).unwrap_or_default()
}

fn json_event(kind: &str, id: u64, data: &impl Serialize) -> Event {
    Event::default().event(kind).id(id.to_string()).json_data(data).unwrap_or_default()
}

/// Ownership changes as Server-Sent Events: `event: ownership`, `id:` the revision,
/// `data:` an `OwnershipEventView`. A revision older than the registry keeps is a
/// 400 `INVALID_ARGUMENT` ("compacted"): list again and follow from that list's
/// revision.
#[utoipa::path(get, path = "/v1/shards/events", tag = "shards", params(OwnershipEventsQuery),
    responses((status = 200, description = "`ownership` events (id: the revision), `error` last if the stream fails", content_type = "text/event-stream", body = OwnershipEventView)))]
pub(super) async fn ownership_events(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Params(q): Params<OwnershipEventsQuery>,
) -> Result<Response, ApiError> {
    let ctx = context(peer, &headers);
    let need = Need::ns_or_operator(Role::Reader, &q.ns)?;
    let from_revision = resume_from(&headers, q.from_revision, 0)?;
    let slot = gw.stream_slot()?;
    let req = rpb::WatchOwnershipRequest { from_revision, ns: q.ns };
    let upstream = gw.registry(&ctx, need, req, |mut c, r| async move { c.watch_ownership(r).await }).await?;
    Ok(sse(&gw, upstream, slot, |e: rpb::OwnershipEvent| vec![json_event("ownership", e.revision, &OwnershipEventView::from(&e))]).into_response())
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CompactedView {
    /// Re-read the lock and follow from this revision.
    compact_revision: u64,
}

/// A lock's events as Server-Sent Events: `event: lock`, `id:` the revision, `data:`
/// an `EventView`; from now on, or after `from_revision`. When that revision is
/// older than the cell keeps, a `compacted` event says from where to continue after
/// re-reading the lock.
#[utoipa::path(get, path = "/v1/locks/{ns}/{shard}/{name}/events", tag = "locks", params(LockPath, EventsQuery),
    responses((status = 200, description = "`lock` events (id: the revision); `compacted` ({compact_revision}); `error` last if the stream fails", content_type = "text/event-stream", body = EventView)))]
pub(super) async fn lock_events(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
    Params(q): Params<EventsQuery>,
) -> Result<Response, ApiError> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let from_revision = resume_from(&headers, q.from_revision, 0)?;
    let slot = gw.stream_slot()?;
    let upstream = gw.watch(&ctx, pb::WatchRequest { shard: shard_ref(&k), name, from_revision }).await?;
    let each = move |w: pb::WatchResponse| {
        let mut out = Vec::with_capacity(w.events.len() + 1);
        if w.compact_revision > 0 {
            out.push(Event::default().event("compacted").json_data(CompactedView { compact_revision: w.compact_revision }).unwrap_or_default());
        }
        out.extend(w.events.iter().map(|e| json_event("lock", e.revision, &EventView::from_pb(e, |id| session_handle(&k, id)))));
        out
    };
    Ok(sse(&gw, upstream, slot, each).into_response())
}
