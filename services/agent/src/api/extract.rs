//! Extractors that reject with [`ApiError`] instead of axum's plain-text rejections, so every error the
//! API returns is `{code, message}` with a documented status.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use ufo_common::ErrorCode;

use super::error::ApiError;

/// `axum::Json` with JSON errors: syntax or wrong shape → 400, not JSON → 415, too large → 413.
/// Bodies must be JSON objects (serde would otherwise accept an array for a struct).
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(req, state).await?;
        if !value.is_object() {
            return Err(ApiError::invalid("the body must be a JSON object"));
        }
        // Through axum's decoder again so the error names the field's path (`limits.max_steps: ...`).
        let bytes = serde_json::to_vec(&value).map_err(|e| ApiError::invalid(e.to_string()))?;
        let axum::Json(body) = axum::Json::<T>::from_bytes(&bytes)?;
        Ok(Json(body))
    }
}

/// `axum::extract::Path` with JSON errors (400).
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// `axum::extract::Query` with JSON errors (400).
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(e) => ApiError::invalid(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::invalid(e.body_text()),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected content-type: application/json",
            ),
            JsonRejection::BytesRejection(e)
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body too large")
            }
            other => ApiError::invalid(other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::invalid(format!("invalid path: {}", rejection.body_text()))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid(format!("invalid query: {}", rejection.body_text()))
    }
}
