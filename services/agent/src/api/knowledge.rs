//! The knowledge routes (issue 33): help documents in (`POST /v1/knowledge/documents`, admin keys only),
//! ranked hits out (`GET /v1/knowledge/search`: exactly what the agents retrieve for that text, for the
//! caller as the owner of their tasks) and the owner's rating of a finished task's experience
//! (`POST /v1/tasks/{id}/rating`), and an admin's sharing of one caller's experience or demonstration
//! with others (`POST /v1/knowledge/{id}/share`, `…/unshare`). Documents are parsed and stored by the
//! session service's `KnowledgeStore`, all files of an upload in one transaction: a refused file stores
//! none.

use axum::Extension;
use axum::extract::State;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use ufo_common::ErrorCode;
use ufo_proto::v1::{
    AddDocumentRequest, AddDocumentsRequest, DocumentFormat, ExperienceRating, KnowledgeHit,
    KnowledgeItem, KnowledgeKind, RateExperienceRequest, ShareKnowledgeRequest,
};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::auth::{Caller, Role};
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use crate::store::knowledge::render;

/// Longest application name, in characters.
pub const MAX_APP_CHARS: usize = 100;
/// Longest file name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// `POST /v1/knowledge/documents`: help files for one application.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsBody {
    /// The application the documents are for (e.g. `zenity`); absent or "" = any application.
    #[serde(default)]
    #[schema(max_length = 100, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub app: String,
    /// The files: Markdown (`.md`), HTML without scripts (`.html`), plain text (`.txt`) or GNOME Mallard
    /// (`.page`), chosen by the name's extension.
    #[schema(min_items = 1)]
    pub files: Vec<DocumentFile>,
}

/// One help file: its name and its content, as text or base64 (exactly one of them).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentFile {
    /// The file name, cited with every hit; its extension picks the format.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: String,
    /// The content as text.
    #[serde(default)]
    pub content: Option<String>,
    /// The content as base64 (for bytes as read from disk; a binary file is refused).
    #[serde(default)]
    pub content_base64: Option<String>,
}

/// One stored file.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredDocument {
    /// The file name.
    pub source: String,
    /// Sections stored (a section per heading; long ones split).
    pub sections: u32,
    /// Sections of an earlier upload of the same file that were replaced.
    pub replaced: u32,
}

/// What an upload stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DocumentsView {
    /// The application (lowercase; "" = any).
    pub app: String,
    /// The files, in request order.
    pub documents: Vec<StoredDocument>,
}

/// `GET /v1/knowledge/search`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// The text: a request (what the HostAgent searches with) or a subtask (the AppAgent's).
    #[param(min_length = 1, pattern = r"^[^\x00]*[^\x00\s][^\x00]*$")]
    pub q: String,
    /// The application (the AppAgent's search); absent = any application (the HostAgent's).
    #[param(max_length = 100, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub app: Option<String>,
}

/// One ranked hit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HitView {
    /// The knowledge item's id (what `POST /v1/knowledge/{id}/share` takes).
    pub id: String,
    /// `document`, `experience` or `demonstration`.
    pub kind: String,
    /// Whose experience or demonstration it is ("" for documents).
    pub owner: String,
    /// Another caller's item that an admin shared with this caller (or with everyone).
    pub shared: bool,
    /// The citation: a file name, or `task:<id>`.
    pub source: String,
    /// The application ("" = any).
    pub application: String,
    /// The section's heading, or the task's request.
    pub title: String,
    /// The text.
    pub text: String,
    /// An experience's model-written summary ("" when none; `--experience-model-summary`).
    pub model_summary: String,
    /// Example code and command lines of a section.
    pub code: String,
    /// The database's full-text score (higher is better).
    pub score: f64,
}

/// What the agents would retrieve for this text.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchView {
    /// Whether the agents retrieve knowledge at all (`--knowledge`); the hits are what they would get.
    pub knowledge_enabled: bool,
    /// The owner whose experiences were searched (the caller).
    pub owner: String,
    /// The hits, best first (at most `--knowledge-top-k`).
    pub hits: Vec<HitView>,
    /// The prompt's knowledge section as the agents render it ("" without hits).
    pub prompt: String,
}

/// `POST /v1/knowledge/{id}/share` and `…/unshare`: callers to add to (or take off) an item's sharing,
/// and/or everyone.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareBody {
    /// Callers (API key names) whose searches and prompts get the item (or no longer get it); names
    /// nobody uses yet are accepted (a key named so later gets it); the owner's own name is ignored.
    #[serde(default)]
    pub with: Vec<String>,
    /// Every caller (share), or no longer every caller (unshare; the named callers keep it).
    #[serde(default)]
    pub everyone: bool,
}

/// An experience's or demonstration's sharing now.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SharingView {
    /// The item.
    pub id: String,
    /// `experience` or `demonstration`.
    pub kind: String,
    /// Whose it is.
    pub owner: String,
    /// Its citation (`task:<id>`, `recording:<id>`).
    pub source: String,
    /// Its title (the request, or what the demonstration shows).
    pub title: String,
    /// The callers besides the owner whose searches get it, sorted.
    pub shared_with: Vec<String>,
    /// Shared with every caller.
    pub everyone: bool,
    /// Whether it can be retrieved at all (false: a failed task's or a bad-rated experience, which no one
    /// gets, shared or not).
    pub retrievable: bool,
}

/// `POST /v1/tasks/{id}/rating`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RatingBody {
    /// `good`, or `bad` (a bad experience is never retrieved again).
    pub rating: Rating,
}

/// An experience's rating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    /// Offered as an example.
    Good,
    /// Never offered again.
    Bad,
}

/// A rated experience.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RatingView {
    /// The task.
    pub task_id: String,
    /// The rating now.
    pub rating: Rating,
    /// Whether the task finished (a failed task's experience is never retrieved, whatever its rating).
    pub succeeded: bool,
}

fn kind_name(kind: i32) -> &'static str {
    match KnowledgeKind::try_from(kind) {
        Ok(KnowledgeKind::Experience) => "experience",
        Ok(KnowledgeKind::Demonstration) => "demonstration",
        _ => "document",
    }
}

fn hit_view(hit: &KnowledgeHit) -> Option<HitView> {
    let item = hit.item.as_ref()?;
    Some(HitView {
        id: item.id.clone(),
        kind: kind_name(item.kind).to_owned(),
        owner: item.owner.clone(),
        shared: hit.shared,
        source: item.source.clone(),
        application: item.application.clone(),
        title: item.title.clone(),
        text: item.body.clone(),
        model_summary: item.model_summary.clone(),
        code: item.code.clone(),
        score: hit.score,
    })
}

/// A short name: no control characters, at most `max` characters.
fn short_name(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{field} must not contain NUL or control characters"
        )));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "{field} must be at most {max} characters"
        )));
    }
    Ok(())
}

/// Stores help documents (admin keys only): every file is parsed and checked, then all are stored in one
/// transaction, each replacing an earlier upload of the same name for the same application. A binary
/// file, NUL, HTML with scripts, an unknown format or a file over the session service's limit is 400 and
/// stores nothing; a body over `--knowledge-max-upload-bytes` is 413.
#[utoipa::path(post, path = "/v1/knowledge/documents", tag = "knowledge", request_body = DocumentsBody,
    responses((status = 200, description = "what was stored", body = DocumentsView),
              (status = 403, description = "the key is not an admin key")))]
pub async fn add_documents(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<DocumentsBody>,
) -> Result<axum::Json<DocumentsView>, ApiError> {
    if caller.role != Role::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "adding help documents needs an admin key (--api-admins; `ufo up --admin-key` makes one)",
        ));
    }
    short_name("app", &body.app, MAX_APP_CHARS)?;
    let max_files = state.tasks.limits().knowledge_max_upload_files as usize;
    if body.files.is_empty() {
        return Err(ApiError::invalid("files: at least one file is required"));
    }
    if body.files.len() > max_files {
        return Err(ApiError::invalid(format!(
            "files: {} files; an upload may have at most {max_files}",
            body.files.len()
        )));
    }
    let names: Vec<String> = body.files.iter().map(|f| f.name.clone()).collect();
    let mut documents = Vec::with_capacity(body.files.len());
    for (i, file) in body.files.into_iter().enumerate() {
        let field = |f: &str| format!("files[{i}].{f}");
        if file.name.trim().is_empty() {
            return Err(ApiError::invalid(format!("{} is required", field("name"))));
        }
        short_name(&field("name"), &file.name, MAX_NAME_CHARS)?;
        let content = match (file.content, file.content_base64) {
            (Some(text), None) => text.into_bytes(),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|e| {
                    ApiError::invalid(format!("{} is not base64: {e}", field("content_base64")))
                })?,
            _ => {
                return Err(ApiError::invalid(format!(
                    "{}: give exactly one of content and content_base64",
                    field("content")
                )));
            }
        };
        documents.push(AddDocumentRequest {
            application: body.app.clone(),
            source: file.name,
            format: DocumentFormat::Unspecified.into(),
            content: content.into(),
        });
    }
    let span = tracing::info_span!("knowledge.add_documents", caller = %caller.name, files = documents.len());
    let stored = tracing::Instrument::instrument(
        state
            .tasks
            .knowledge()
            .client()
            .add_documents(AddDocumentsRequest { documents }),
        span,
    )
    .await
    .map_err(|status| {
        // The session service names the file ("documents[2] (\"x.png\"): content: ..."): say files[2].
        let message = status.message().replacen("documents[", "files[", 1);
        ApiError::from(tonic::Status::new(status.code(), message))
    })?
    .into_inner();
    tracing::info!(caller = %caller.name, files = stored.documents.len(), "help documents stored");
    Ok(axum::Json(DocumentsView {
        app: body.app.trim().to_lowercase(),
        documents: stored
            .documents
            .into_iter()
            .zip(names)
            .map(|(d, source)| StoredDocument {
                source,
                sections: u32::try_from(d.items.len()).unwrap_or(u32::MAX),
                replaced: d.replaced,
            })
            .collect(),
    }))
}

/// The ranked hits the agents retrieve for `q` (and `app`) for the caller, with their sources, and the
/// prompt section they become: `q` = a request without `app` is the HostAgent's search, a subtask with
/// its `app` the AppAgent's. Documents are everyone's; experiences the caller's own and those an admin
/// shared with them (`shared`, `owner`), never a failed or bad-rated one.
#[utoipa::path(get, path = "/v1/knowledge/search", tag = "knowledge", params(SearchQuery),
    responses((status = 200, description = "the hits, best first", body = SearchView)))]
pub async fn search(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<SearchQuery>,
) -> Result<axum::Json<SearchView>, ApiError> {
    if query.q.contains('\0') {
        return Err(ApiError::invalid("q must not contain NUL characters"));
    }
    // Blank as the documented pattern says (JavaScript's \s: U+FEFF is blank, U+0085 is not).
    let blank = |c: char| (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}';
    if query.q.chars().all(blank) {
        return Err(ApiError::invalid("q is required"));
    }
    let max = state.tasks.limits().knowledge_max_query_chars as usize;
    if query.q.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "q must be at most {max} characters"
        )));
    }
    let app = query.app.unwrap_or_default();
    short_name("app", &app, MAX_APP_CHARS)?;
    let knowledge = state.tasks.knowledge().for_owner(&caller.name);
    // Nothing searchable (only U+0085 and spaces): no hits, as the agents would get.
    let hits = if query.q.trim().is_empty() {
        Vec::new()
    } else {
        knowledge.search(&query.q, &app).await?
    };
    Ok(axum::Json(SearchView {
        knowledge_enabled: state.tasks.knowledge_on(),
        owner: caller.name.clone(),
        prompt: render(&hits, knowledge.budget()),
        hits: hits.iter().filter_map(hit_view).collect(),
    }))
}

/// Rates the experience of a finished task of the caller's (an admin: of any task) good or bad; a bad
/// one is never retrieved again. 404 when the task is not the caller's; 409 when it has no experience
/// (it has not ended, or did not end while `--knowledge` was on).
#[utoipa::path(post, path = "/v1/tasks/{id}/rating", tag = "knowledge",
    params(("id" = Uuid, Path, description = "task id")), request_body = RatingBody,
    responses((status = 200, description = "the rated experience", body = RatingView)))]
pub async fn rate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<RatingBody>,
) -> Result<axum::Json<RatingView>, ApiError> {
    let session = state.tasks.session(&id.to_string(), &caller).await?;
    let rating = match body.rating {
        Rating::Good => ExperienceRating::Good,
        Rating::Bad => ExperienceRating::Bad,
    };
    let item = state
        .tasks
        .knowledge()
        .client()
        .rate_experience(RateExperienceRequest {
            task_id: session.id.clone(),
            owner: session.owner.clone(),
            rating: rating.into(),
        })
        .await
        .map_err(|status| match status.code() {
            // The task exists (the lookup above found it): its state, not its id, is the problem.
            tonic::Code::NotFound => ApiError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "task {} has no experience to rate (it has not ended with --knowledge on)",
                    session.id
                ),
            ),
            _ => ApiError::from(status),
        })?
        .into_inner();
    tracing::info!(caller = %caller.name, task_id = %session.id, rating = ?body.rating, "experience rated");
    Ok(axum::Json(RatingView {
        task_id: session.id,
        rating: body.rating,
        succeeded: item.succeeded,
    }))
}

/// The item a share names: its knowledge id, or `task:<id>` (the experience of that task, as its
/// citation says).
fn share_target(id: &str) -> Result<(String, String), ApiError> {
    let parse = |text: &str, what: &str| {
        Uuid::parse_str(text)
            .map(|u| u.to_string())
            .map_err(|_| ApiError::invalid(format!("id: {what}")))
    };
    match id.strip_prefix("task:") {
        Some(task) => Ok((
            String::new(),
            parse(task, "task:<id> needs a task id (a UUID)")?,
        )),
        None => Ok((
            parse(
                id,
                "a knowledge item's id (a UUID, as search hits show it) or task:<task id>",
            )?,
            String::new(),
        )),
    }
}

fn sharing_view(item: KnowledgeItem) -> SharingView {
    SharingView {
        kind: kind_name(item.kind).to_owned(),
        retrievable: item.succeeded && item.rating() != ExperienceRating::Bad,
        id: item.id,
        owner: item.owner,
        source: item.source,
        title: item.title,
        shared_with: item.shared_with,
        everyone: item.shared_everyone,
    }
}

/// Shares or unshares (admin keys only).
async fn change_sharing(
    state: &AppState,
    caller: &Caller,
    id: &str,
    body: ShareBody,
    unshare: bool,
) -> Result<axum::Json<SharingView>, ApiError> {
    let verb = if unshare { "unsharing" } else { "sharing" };
    if caller.role != Role::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!(
                "{verb} experiences and demonstrations needs an admin key (--api-admins; `ufo up \
                 --admin-key` makes one)"
            ),
        ));
    }
    let (id, task_id) = share_target(id)?;
    let max = state.tasks.limits().knowledge_max_share_callers as usize;
    if body.with.len() > max {
        return Err(ApiError::invalid(format!(
            "with: {} names; at most {max} in one call (--knowledge-max-share-callers), or everyone",
            body.with.len()
        )));
    }
    for (i, name) in body.with.iter().enumerate() {
        let field = format!("with[{i}]");
        if name.is_empty() {
            return Err(ApiError::invalid(format!("{field} is empty")));
        }
        short_name(&field, name, MAX_NAME_CHARS)?;
        if name.starts_with(' ') || name.ends_with(' ') {
            return Err(ApiError::invalid(format!(
                "{field} must not start or end with spaces"
            )));
        }
    }
    if body.with.is_empty() && !body.everyone {
        return Err(ApiError::invalid(
            "with: name at least one caller, or set everyone",
        ));
    }
    let request = ShareKnowledgeRequest {
        id,
        task_id,
        callers: body.with,
        everyone: body.everyone,
    };
    let span = tracing::info_span!(
        "knowledge.share",
        caller = %caller.name,
        unshare,
        callers = request.callers.len(),
        everyone = request.everyone
    );
    let mut client = state.tasks.knowledge().client();
    let call = async {
        if unshare {
            client.unshare_knowledge(request).await
        } else {
            client.share_knowledge(request).await
        }
    };
    let item = tracing::Instrument::instrument(call, span)
        .await
        .map_err(|status| {
            // The session service names its field `callers`; this route's is `with`.
            let message = status.message().replacen("callers", "with", 1);
            ApiError::from(tonic::Status::new(status.code(), message))
        })?
        .into_inner();
    tracing::info!(caller = %caller.name, id = %item.id, owner = %item.owner,
        shared_with = ?item.shared_with, everyone = item.shared_everyone, unshare, "knowledge sharing changed");
    Ok(axum::Json(sharing_view(item)))
}

/// Shares one caller's experience or demonstration with named callers and/or everyone (admin keys only):
/// their searches (`GET /v1/knowledge/search`), their tasks' prompts and reuse then get it too, marked
/// shared with its owner named; a failed or bad-rated one still reaches no one. `id` is the item's id
/// (search hits show it) or `task:<task id>`. 403 for a non-admin key; 404 for an unknown item; 400 for a
/// document (every caller's already), a bad name, no one named, or more names than the limit.
#[utoipa::path(post, path = "/v1/knowledge/{id}/share", tag = "knowledge",
    params(("id" = String, Path, description = "the item's id, or task:<task id>")),
    request_body = ShareBody,
    responses((status = 200, description = "the item's sharing now", body = SharingView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such experience or demonstration")))]
pub async fn share(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Json(body): Json<ShareBody>,
) -> Result<axum::Json<SharingView>, ApiError> {
    change_sharing(&state, &caller, &id, body, false).await
}

/// Takes named callers and/or everyone off an item's sharing (admin keys only); names it was not shared
/// with are ignored. The same ids and answers as `…/share`.
#[utoipa::path(post, path = "/v1/knowledge/{id}/unshare", tag = "knowledge",
    params(("id" = String, Path, description = "the item's id, or task:<task id>")),
    request_body = ShareBody,
    responses((status = 200, description = "the item's sharing now", body = SharingView),
              (status = 403, description = "the key is not an admin key"),
              (status = 404, description = "no such experience or demonstration")))]
pub async fn unshare(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Json(body): Json<ShareBody>,
) -> Result<axum::Json<SharingView>, ApiError> {
    change_sharing(&state, &caller, &id, body, true).await
}
