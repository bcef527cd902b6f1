//! The HTTP lists: namespaces, shards and sessions, in pages of at most `page_size`
//! continued by `page_token` (the last key of the page, so items created or removed
//! between pages do not shift the others).

use super::*;
use holdfast_proto::json::SessionInfoView;

/// The default and the largest page of a listing.
pub const PAGE_SIZE: usize = 100;
pub const MAX_PAGE_SIZE: usize = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct PageQuery {
    /// At most this many items (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<usize>,
    /// The `next_page_token` of the previous page; absent for the first.
    page_token: Option<String>,
}

impl PageQuery {
    /// The page size asked for, checked (before any upstream call).
    fn size(&self) -> Result<usize, ApiError> {
        match self.page_size.unwrap_or(PAGE_SIZE) {
            size @ 1..=MAX_PAGE_SIZE => Ok(size),
            size => Err(bad(format!("page_size must be 1 to {MAX_PAGE_SIZE}, not {size}"))),
        }
    }
}

/// One page of `items` sorted by `key`: those after the page token, at most the page
/// size, and the token of the next page if more remain. The token is the last key of
/// the page: items created or removed between pages do not shift the others.
fn page<T>(mut items: Vec<T>, key: impl Fn(&T) -> String, q: &PageQuery) -> Result<(Vec<T>, Option<String>), ApiError> {
    let size = q.size()?;
    items.sort_by_key(&key);
    if let Some(after) = q.page_token.as_deref().filter(|t| !t.is_empty()) {
        items.retain(|i| key(i).as_str() > after);
    }
    let next = (items.len() > size).then(|| key(&items[size - 1]));
    items.truncate(size);
    Ok((items, next))
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NamespacePage {
    namespaces: Vec<NamespaceView>,
    /// Pass as `page_token` for the next page; `null` on the last.
    next_page_token: Option<String>,
}

/// Every namespace (operator).
#[utoipa::path(get, path = "/v1/namespaces", tag = "namespaces", params(PageQuery),
    responses((status = 200, description = "A page of namespaces, by name", body = NamespacePage)))]
pub(super) async fn list_namespaces(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Params(q): Params<PageQuery>,
) -> ApiResult<NamespacePage> {
    let ctx = context(peer, &headers);
    q.size()?;
    let r = gw.registry(&ctx, Need::Operator, rpb::ListNamespacesRequest {}, |mut c, r| async move { c.list_namespaces(r).await }).await?;
    let all = r.configs.iter().map(|c| namespace_view(Some(c))).collect::<Result<Vec<_>, _>>()?;
    let (namespaces, next_page_token) = page(all, |n| n.name.clone(), &q)?;
    Ok(Json(NamespacePage { namespaces, next_page_token }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ShardsQuery {
    /// Only this namespace's shards (a reader of it may list them); absent: every
    /// namespace (operator).
    #[serde(default)]
    ns: String,
    /// Only shards homed in this region.
    #[serde(default)]
    region: String,
    /// Only shards served by this cell (operator).
    #[serde(default)]
    cell: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ShardPage {
    shards: Vec<OwnerView>,
    /// The ownership revision this page reflects. Follow
    /// `GET /v1/shards/events?from_revision=` the first page's revision: every change
    /// after it arrives there, so the pages and the stream converge.
    revision: u64,
    next_page_token: Option<String>,
}

/// Where each shard lives.
#[utoipa::path(get, path = "/v1/shards", tag = "shards", params(ShardsQuery, PageQuery),
    responses((status = 200, description = "A page of shard owners, by namespace and shard", body = ShardPage)))]
pub(super) async fn list_shards(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Params(f): Params<ShardsQuery>,
    Params(q): Params<PageQuery>,
) -> ApiResult<ShardPage> {
    let ctx = context(peer, &headers);
    q.size()?;
    let need = if f.cell.is_empty() { Need::ns_or_operator(Role::Reader, &f.ns)? } else { Need::Operator };
    let req = rpb::ListShardsRequest { ns: f.ns, cell: f.cell };
    let r = gw.registry(&ctx, need, req, |mut c, r| async move { c.list_shards(r).await }).await?;
    let all = r.shards.iter().filter(|o| f.region.is_empty() || o.region == f.region).map(OwnerView::from).collect();
    let (shards, next_page_token) = page(all, |o: &OwnerView| format!("{}:{}", o.ns, o.shard), &q)?;
    Ok(Json(ShardPage { shards, revision: r.revision, next_page_token }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct SessionsQuery {
    ns: String,
    #[serde(default = "default_shard")]
    shard: String,
    /// Only the caller's own sessions (those bound to the identity it authenticated
    /// as).
    #[serde(default)]
    mine: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SessionPage {
    sessions: Vec<SessionInfoView>,
    next_page_token: Option<String>,
}

/// The sessions of a shard (a reader of its namespace), or the caller's own.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(SessionsQuery, PageQuery),
    responses((status = 200, description = "A page of sessions, by id", body = SessionPage)))]
pub(super) async fn list_sessions(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Params(f): Params<SessionsQuery>,
    Params(q): Params<PageQuery>,
) -> ApiResult<SessionPage> {
    let ctx = context(peer, &headers);
    q.size()?;
    let k = key(f.ns, f.shard)?;
    let (who, r) = gw.list_sessions_as(&ctx, pb::ListSessionsRequest { shard: shard_ref(&k) }).await?;
    let mine = |s: &&pb::SessionInfo| !f.mine || s.owner == who.as_deref().unwrap_or_default();
    let all = r.sessions.iter().filter(mine).map(|s| SessionInfoView::from_pb(s, |id| session_handle(&k, id))).collect();
    let (sessions, next_page_token) = page(all, |s: &SessionInfoView| s.session.clone(), &q)?;
    Ok(Json(SessionPage { sessions, next_page_token }))
}
