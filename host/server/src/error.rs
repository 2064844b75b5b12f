//! The one conversion from [`ApiError`] into an HTTP response with a
//! Kubernetes `Status` body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use wasm_apiserver_api::ApiError;

/// An [`ApiError`] as an axum response.
#[derive(Debug)]
pub struct ErrorResponse(pub ApiError);

impl From<ApiError> for ErrorResponse {
    fn from(e: ApiError) -> Self {
        ErrorResponse(e)
    }
}

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        if let ApiError::Internal(msg) = &self.0 {
            tracing::error!(error = %msg, "internal error");
        }
        let code = StatusCode::from_u16(self.0.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Ends with a newline, as Go's JSON encoder writes it.
        let mut body = self.0.status_body();
        body.push(b'\n');
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Clients retry after a Retry-After; storage outages fail fast instead.
        if matches!(self.0, ApiError::TooLargeResourceVersion { .. }) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}
