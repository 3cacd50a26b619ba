//! The OpenAPI 3.1 document: the handlers' annotations, plus what they share and what depends on the
//! configuration — the bearer security scheme, the `{code, message}` error responses every operation may
//! return, and the configured caps (so a schema-valid request is never refused for exceeding a limit the
//! document did not state).

use serde_json::{Value as Json, json};
use utoipa::OpenApi as _;
use utoipa::openapi::OpenApi;

use super::error::ErrorSchema;
use super::live::LiveFrame;
use super::model::{ScreenshotKind, TaskStatus};
use super::sse::{EventView, StreamEnd};
use crate::config::ApiConfig;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "UFO agent API", description = "Submit desktop tasks, follow their steps, answer and confirm."),
    // The event stream's messages are not a response body a generator can read, so their schemas are
    // named here: clients parse each SSE message's `data:` with them.
    components(schemas(ErrorSchema, ScreenshotKind, TaskStatus, EventView, StreamEnd, LiveFrame)),
    security(("bearer" = [])),
    modifiers(&Bearer)
)]
struct Base;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "an API key configured with --api-keys or --api-keys-file",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document the router starts from.
pub fn base() -> OpenApi {
    Base::openapi()
}

/// Error statuses by operation kind: every operation may fail auth, hit an unavailable session service or
/// an internal error; operations with path or query parameters may get 400; bodies add 400/413/415.
fn errors_for(method: &str, path: &str, has_params: bool, open: bool) -> Vec<(u16, &'static str)> {
    let mut out = vec![
        (500, "internal error"),
        (503, "the session service is unavailable"),
    ];
    if !open {
        out.push((401, "missing or invalid API key"));
    }
    if has_params {
        out.push((400, "invalid path or query parameter"));
    }
    if path.contains("{id}") {
        out.push((404, "no such task (or step, or screenshot)"));
    }
    if method == "post" {
        out.extend([
            (
                400,
                "malformed JSON or an invalid field (the message names it)",
            ),
            (413, "request body too large"),
            (415, "content type is not application/json"),
        ]);
        if path.contains("{id}") {
            out.push((
                409,
                "the task's state does not allow this (ended, nothing pending, no experience to rate)",
            ));
        }
    }
    if path.contains("/steps") {
        out.push((400, "invalid step number"));
    }
    if method == "post" && path == "/v1/desktop/calls" {
        out.extend([
            (403, "the consent policy denies the call"),
            (
                409,
                "the policy wants a confirmation, or the executor refused the command",
            ),
        ]);
    }
    if method == "post" && path == "/v1/tasks" {
        out.extend([
            (404, "replay_of: no such task"),
            (409, "replay_of: the task has not finished or has no steps"),
        ]);
    }
    out
}

/// Adds the shared error responses and the configured caps; returns the JSON served at `/openapi.json`.
pub fn finish(
    doc: OpenApi,
    limits: &ApiConfig,
    executors: &crate::dispatch::registry::ExecutorRegistry,
    prices: &super::checks::PriceCheck,
) -> Json {
    let mut doc = serde_json::to_value(doc).unwrap_or_else(|_| json!({}));
    if let Some(paths) = doc.get_mut("paths").and_then(Json::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, op) in item.iter_mut() {
                let has_params = op
                    .get("parameters")
                    .and_then(Json::as_array)
                    .is_some_and(|p| !p.is_empty());
                let open = op
                    .get("security")
                    .and_then(Json::as_array)
                    .is_some_and(|s| {
                        s.iter()
                            .all(|r| r.as_object().is_some_and(|o| o.is_empty()))
                    });
                let Some(responses) = op.get_mut("responses").and_then(Json::as_object_mut) else {
                    continue;
                };
                let error =
                    json!({"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}});
                for (status, description) in errors_for(method, path, has_params, open) {
                    responses
                        .entry(status.to_string())
                        .or_insert_with(|| json!({"description": description, "content": error}));
                }
                // Every failure's body is `{code, message}`, also where a handler documents only a
                // status and a description (e.g. 403 for a key that is not an admin's).
                for (status, response) in responses.iter_mut() {
                    if status.starts_with(['4', '5'])
                        && let Some(response) = response.as_object_mut()
                    {
                        response.entry("content").or_insert_with(|| error.clone());
                    }
                }
            }
        }
    }
    // Raw bytes: `contentMediaType` says so in JSON Schema 2020-12, `format: binary` to the client
    // generators (openapi-python-client returns a `File`, not text, for it).
    let bytes = |media: &str| {
        let mut schema = json!({"type": "string", "format": "binary"});
        if media != "application/octet-stream" {
            schema["contentMediaType"] = json!(media);
        }
        json!({ "schema": schema })
    };
    if let Some(ok) =
        doc.pointer_mut("/paths/~1v1~1tasks~1{id}~1steps~1{n}~1screenshot/get/responses/200")
    {
        ok["content"] = json!({
            "image/png": bytes("image/png"),
            "image/jpeg": bytes("image/jpeg"),
            "application/octet-stream": bytes("application/octet-stream"),
        });
    }
    // A task needs its request unless it replays one (then the replayed task's request is used),
    // on_mismatch goes with replay_of only, and reuse does not: rules serde's derive cannot state. Stated with if/then rather
    // than an `anyOf` of `required` lists, which client generators read as a union of unnamed types (the
    // generated Python client took `Any` for the body).
    if let Some(submit) = doc.pointer_mut("/components/schemas/SubmitTask") {
        submit["if"] = json!({"not": {"required": ["replay_of"]}});
        submit["then"] = json!({"required": ["request"]});
        submit["dependentRequired"] = json!({"on_mismatch": ["replay_of"]});
        // A replay follows the named task already: `reuse: true` beside `replay_of` is refused (400).
        submit["not"] = json!({
            "required": ["replay_of", "reuse"],
            "properties": {"reuse": {"const": true}},
        });
    }
    let caps = [
        (
            "/components/schemas/SubmitTask/properties/request/maxLength",
            json!(limits.max_request_chars),
        ),
        (
            "/components/schemas/FollowUpBody/properties/request/maxLength",
            json!(limits.max_request_chars),
        ),
        (
            "/components/schemas/LimitsBody/properties/max_steps/maximum",
            json!(limits.max_steps_cap),
        ),
        (
            "/components/schemas/LimitsBody/properties/max_cost/maximum",
            json!(limits.max_cost_cap),
        ),
        (
            "/components/schemas/LimitsBody/properties/timeout_seconds/maximum",
            json!(limits.timeout_cap_seconds),
        ),
        (
            "/components/schemas/CancelBody/properties/reason/maxLength",
            json!(limits.max_answer_chars),
        ),
        (
            "/components/schemas/ConfirmationBody/properties/reason/maxLength",
            json!(limits.max_answer_chars),
        ),
        (
            "/components/schemas/AnswersBody/properties/answers/items/maxLength",
            json!(limits.max_answer_chars),
        ),
        (
            "/components/schemas/DocumentsBody/properties/files/maxItems",
            json!(limits.knowledge_max_upload_files),
        ),
        (
            "/components/schemas/ShareBody/properties/with/maxItems",
            json!(limits.knowledge_max_share_callers),
        ),
    ];
    for (pointer, value) in caps {
        if let Some((parent, key)) = pointer.rsplit_once('/')
            && let Some(obj) = doc.pointer_mut(parent).and_then(Json::as_object_mut)
        {
            obj.insert(key.to_owned(), value);
        }
    }
    // The session service's page token is the hex form of `<micros>.<uuid>`; stating it lets clients (and
    // schemathesis) tell a token from garbage, which the session service refuses with 400.
    let h = "(3[0-9]|6[1-6])";
    let token = format!("^((3[0-9]){{1,16}}2e{h}{{8}}2d{h}{{4}}2d{h}{{4}}2d{h}{{4}}2d{h}{{12}})?$");
    if let Some(params) = doc
        .pointer_mut("/paths/~1v1~1tasks/get/parameters")
        .and_then(Json::as_array_mut)
    {
        for p in params.iter_mut().filter(|p| p["name"] == "page_token") {
            p["schema"] = json!({"type": ["string", "null"], "pattern": token});
        }
    }
    // Page sizes are u32 and clamped to the cap: state the real range (utoipa says int32).
    for (path, name) in [
        ("/paths/~1v1~1tasks/get/parameters", "page_size"),
        ("/paths/~1v1~1tasks~1{id}~1steps/get/parameters", "limit"),
    ] {
        if let Some(params) = doc.pointer_mut(path).and_then(Json::as_array_mut) {
            for p in params.iter_mut().filter(|p| p["name"] == name) {
                p["schema"] =
                    json!({"type": ["integer", "null"], "minimum": 1, "maximum": u32::MAX});
            }
        }
    }
    if let Some(params) = doc
        .pointer_mut("/paths/~1v1~1knowledge~1search/get/parameters")
        .and_then(Json::as_array_mut)
    {
        for p in params.iter_mut().filter(|p| p["name"] == "q") {
            if let Some(schema) = p.get_mut("schema").and_then(Json::as_object_mut) {
                schema.insert("maxLength".into(), json!(limits.knowledge_max_query_chars));
            }
        }
    }
    // A caller's name to share with: 1–200 characters, no control characters, no surrounding spaces.
    if let Some(items) = doc.pointer_mut("/components/schemas/ShareBody/properties/with/items") {
        *items = json!({
            "type": "string",
            "minLength": 1,
            "maxLength": super::knowledge::MAX_NAME_CHARS,
            "pattern": r"^[^\x00-\x20\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f])?$",
        });
    }
    // A help file carries its content as text or as base64, never both (if/then/else for the generators,
    // as above: the same rule as a `oneOf` of `required` lists).
    if let Some(file) = doc.pointer_mut("/components/schemas/DocumentFile") {
        file["if"] = json!({"required": ["content"]});
        file["then"] = json!({"not": {"required": ["content_base64"]}});
        file["else"] = json!({"required": ["content_base64"]});
    }
    // Executors: a registered name (an http(s) address only when the operator enabled addresses; which
    // hosts is not expressible here, so the pattern is wider than what is accepted then).
    let mut alternatives: Vec<String> = executors.names().map(regex_escape).collect();
    if executors.addresses_enabled() {
        alternatives.push(r"https?://[A-Za-z0-9.\-]+(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?/?".to_owned());
    }
    if let Some(obj) = doc
        .pointer_mut("/components/schemas/SubmitTask/properties/executor")
        .and_then(Json::as_object_mut)
    {
        obj.insert(
            "pattern".into(),
            json!(format!("^({})?$", alternatives.join("|"))),
        );
    }
    // Models: without a default price only priced models are accepted (issue 16), so the schema says so.
    for field in ["host_model", "app_model"] {
        let Some((names, default_priced)) = prices.choices(field) else {
            continue;
        };
        let alternatives: Vec<String> = names.iter().map(|n| regex_escape(n)).collect();
        let optional = if default_priced { "?" } else { "" };
        if let Some(obj) = doc
            .pointer_mut(&format!("/components/schemas/ModelBody/properties/{field}"))
            .and_then(Json::as_object_mut)
        {
            obj.insert(
                "pattern".into(),
                json!(format!("^({}){optional}$", alternatives.join("|"))),
            );
        }
    }
    // Cancel's body is optional, but when present it is an object (`null` is refused like `[]`).
    if let Some(body) = doc
        .pointer_mut("/paths/~1v1~1tasks~1{id}~1cancel/post/requestBody")
        .and_then(Json::as_object_mut)
    {
        body.insert("required".into(), json!(false));
        body.insert(
            "content".into(),
            json!({"application/json": {"schema": {"$ref": "#/components/schemas/CancelBody"}}}),
        );
    }
    doc
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = r"\.+*?()|[]{}^$-".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}
