//! The closed set of errors the relay answers with.
//!
//! Every API error is an [`ErrorCode`] (status, exact message, snake_case code) plus the
//! request-specific part carried by [`ApiError`] (`param`, `detail`). Only this crate turns
//! them into bodies: the OpenAI-style shape for video, asset and moderation paths
//! ([`ApiError::openai_body`]) and the vendor shape of `/v1/messages`
//! ([`ApiError::vendor_body`]).
#![forbid(unsafe_code)]

use std::fmt;

use serde_json::{Value, json};

/// One kind of API error. The mapping to status and message is exhaustive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Unauthorized,
    InvalidModel,
    GroupMismatch,
    InvalidDuration,
    InvalidResolution,
    InvalidRatio,
    InvalidSize,
    InvalidImage,
    ReferenceLimitExceeded,
    AssetNotActive,
    PayloadTooLarge,
    RateLimited,
    UpstreamError,
    InvalidRequest,
    InvalidPrompt,
    InvalidAudio,
    InvalidVideo,
    AssetNotFound,
    AssetFamilyMismatch,
    InsufficientQuota,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    TaskNotCompleted,
    TaskNotCancellable,
    IdempotencyConflict,
    RangeNotSatisfiable,
    UnsupportedMediaType,
    Unavailable,
    Timeout,
    Overloaded,
    RequestTimeout,
}

impl ErrorCode {
    /// Every code, for tests and documentation.
    pub const ALL: [ErrorCode; 32] = [
        ErrorCode::Unauthorized,
        ErrorCode::InvalidModel,
        ErrorCode::GroupMismatch,
        ErrorCode::InvalidDuration,
        ErrorCode::InvalidResolution,
        ErrorCode::InvalidRatio,
        ErrorCode::InvalidSize,
        ErrorCode::InvalidImage,
        ErrorCode::ReferenceLimitExceeded,
        ErrorCode::AssetNotActive,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::UpstreamError,
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidPrompt,
        ErrorCode::InvalidAudio,
        ErrorCode::InvalidVideo,
        ErrorCode::AssetNotFound,
        ErrorCode::AssetFamilyMismatch,
        ErrorCode::InsufficientQuota,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::TaskNotCompleted,
        ErrorCode::TaskNotCancellable,
        ErrorCode::IdempotencyConflict,
        ErrorCode::RangeNotSatisfiable,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Overloaded,
        ErrorCode::RequestTimeout,
    ];

    /// HTTP status code.
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::Unauthorized => 401,
            ErrorCode::InvalidModel
            | ErrorCode::GroupMismatch
            | ErrorCode::InvalidDuration
            | ErrorCode::InvalidResolution
            | ErrorCode::InvalidRatio
            | ErrorCode::InvalidSize
            | ErrorCode::InvalidImage
            | ErrorCode::ReferenceLimitExceeded
            | ErrorCode::AssetNotActive
            | ErrorCode::InvalidRequest
            | ErrorCode::InvalidPrompt
            | ErrorCode::InvalidAudio
            | ErrorCode::InvalidVideo
            | ErrorCode::AssetNotFound
            | ErrorCode::AssetFamilyMismatch => 400,
            ErrorCode::InsufficientQuota => 402,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::TaskNotCompleted
            | ErrorCode::TaskNotCancellable
            | ErrorCode::IdempotencyConflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RangeNotSatisfiable => 416,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RateLimited => 429,
            ErrorCode::UpstreamError => 500,
            ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Overloaded => 529,
        }
    }

    /// The exact message of SPEC §7 / CONTRACT §0.2; clients match on status + message.
    pub const fn message(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::InvalidModel => "invalid model",
            ErrorCode::GroupMismatch => "group mismatch",
            ErrorCode::InvalidDuration => "invalid duration",
            ErrorCode::InvalidResolution => "invalid resolution",
            ErrorCode::InvalidRatio => "invalid ratio",
            ErrorCode::InvalidSize => "invalid size",
            ErrorCode::InvalidImage => "invalid image",
            ErrorCode::ReferenceLimitExceeded => "reference limit exceeded",
            ErrorCode::AssetNotActive => "asset not active",
            ErrorCode::PayloadTooLarge => "Payload Too Large",
            ErrorCode::RateLimited => "rate limited",
            ErrorCode::UpstreamError => "upstream error",
            ErrorCode::InvalidRequest => "invalid request",
            ErrorCode::InvalidPrompt => "invalid prompt",
            ErrorCode::InvalidAudio => "invalid audio",
            ErrorCode::InvalidVideo => "invalid video",
            ErrorCode::AssetNotFound => "asset not found",
            ErrorCode::AssetFamilyMismatch => "asset family mismatch",
            ErrorCode::InsufficientQuota => "insufficient quota",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not found",
            ErrorCode::MethodNotAllowed => "method not allowed",
            ErrorCode::TaskNotCompleted => "task not completed",
            ErrorCode::TaskNotCancellable => "task not cancellable",
            ErrorCode::IdempotencyConflict => "idempotency conflict",
            ErrorCode::RangeNotSatisfiable => "range not satisfiable",
            ErrorCode::UnsupportedMediaType => "unsupported media type",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::RequestTimeout => "request timeout",
        }
    }

    /// The message in snake_case, the `code` field of the body.
    pub const fn code(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::InvalidModel => "invalid_model",
            ErrorCode::GroupMismatch => "group_mismatch",
            ErrorCode::InvalidDuration => "invalid_duration",
            ErrorCode::InvalidResolution => "invalid_resolution",
            ErrorCode::InvalidRatio => "invalid_ratio",
            ErrorCode::InvalidSize => "invalid_size",
            ErrorCode::InvalidImage => "invalid_image",
            ErrorCode::ReferenceLimitExceeded => "reference_limit_exceeded",
            ErrorCode::AssetNotActive => "asset_not_active",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidPrompt => "invalid_prompt",
            ErrorCode::InvalidAudio => "invalid_audio",
            ErrorCode::InvalidVideo => "invalid_video",
            ErrorCode::AssetNotFound => "asset_not_found",
            ErrorCode::AssetFamilyMismatch => "asset_family_mismatch",
            ErrorCode::InsufficientQuota => "insufficient_quota",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::TaskNotCompleted => "task_not_completed",
            ErrorCode::TaskNotCancellable => "task_not_cancellable",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::RangeNotSatisfiable => "range_not_satisfiable",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::RequestTimeout => "request_timeout",
        }
    }

    /// The OpenAI-style `type` of the body.
    pub const fn openai_type(self) -> &'static str {
        match self.status() {
            401 => "authentication_error",
            402 => "insufficient_quota",
            404 => "not_found_error",
            429 => "rate_limit_error",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The vendor (messages) `error.type`, by status (CONTRACT §0.1).
    pub const fn vendor_type(self) -> &'static str {
        match self.status() {
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 => "not_found_error",
            408 => "timeout_error",
            409 => "conflict_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            504 => "timeout_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// Whether a client retry can help (drives `x-should-retry` on 5xx).
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited
                | ErrorCode::UpstreamError
                | ErrorCode::Unavailable
                | ErrorCode::Timeout
                | ErrorCode::Overloaded
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status(), self.message())
    }
}

/// An API error: its code plus what names the fault in this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A human sentence naming the field and the accepted values.
    pub detail: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ApiError {
            code,
            param: None,
            detail: detail.into(),
        }
    }

    /// An error blamed on one request field.
    pub fn field(code: ErrorCode, param: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError {
            code,
            param: Some(param.into()),
            detail: detail.into(),
        }
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }

    pub fn message(&self) -> &'static str {
        self.code.message()
    }

    /// Body for video, asset and moderation paths (CONTRACT §0.1).
    pub fn openai_body(&self) -> Value {
        json!({"error": {
            "code": self.code.code(),
            "message": self.code.message(),
            "param": self.param,
            "detail": self.detail,
            "type": self.code.openai_type(),
        }})
    }

    /// Body for `/v1/messages` in the vendor's shape (CONTRACT §0.1).
    ///
    /// For 401, 413, 429 and 5xx the message is the contract's fixed one; for the rest it is the
    /// detail (`"max_tokens: must be >= 1"`), which names the field.
    pub fn vendor_body(&self, request_id: &str) -> Value {
        let message = match self.code {
            ErrorCode::Unauthorized
            | ErrorCode::PayloadTooLarge
            | ErrorCode::RateLimited
            | ErrorCode::UpstreamError
            | ErrorCode::InvalidModel => self.code.message().to_owned(),
            _ if self.detail.is_empty() => self.code.message().to_owned(),
            _ => self.detail.clone(),
        };
        json!({
            "type": "error",
            "error": {"type": self.code.vendor_type(), "message": message},
            "request_id": request_id,
        })
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for ApiError {}

impl From<ErrorCode> for ApiError {
    fn from(code: ErrorCode) -> Self {
        ApiError::new(code, code.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_message_in_snake_case() {
        for code in ErrorCode::ALL {
            let expected = code.message().to_ascii_lowercase().replace(' ', "_");
            assert_eq!(code.code(), expected, "{code:?}");
        }
    }

    #[test]
    fn spec_pairs_are_exact() {
        let pairs = [
            (ErrorCode::Unauthorized, 401, "unauthorized"),
            (ErrorCode::InvalidModel, 400, "invalid model"),
            (ErrorCode::GroupMismatch, 400, "group mismatch"),
            (ErrorCode::InvalidDuration, 400, "invalid duration"),
            (ErrorCode::InvalidResolution, 400, "invalid resolution"),
            (ErrorCode::InvalidRatio, 400, "invalid ratio"),
            (ErrorCode::InvalidSize, 400, "invalid size"),
            (ErrorCode::InvalidImage, 400, "invalid image"),
            (
                ErrorCode::ReferenceLimitExceeded,
                400,
                "reference limit exceeded",
            ),
            (ErrorCode::AssetNotActive, 400, "asset not active"),
            (ErrorCode::PayloadTooLarge, 413, "Payload Too Large"),
            (ErrorCode::RateLimited, 429, "rate limited"),
            (ErrorCode::UpstreamError, 500, "upstream error"),
        ];
        for (code, status, message) in pairs {
            assert_eq!((code.status(), code.message()), (status, message));
        }
    }

    #[test]
    fn openai_body_shape() {
        let err = ApiError::field(
            ErrorCode::InvalidModel,
            "model",
            "model must be model_h3, got \"sora-2\"",
        );
        let body = err.openai_body();
        assert_eq!(body["error"]["code"], "invalid_model");
        assert_eq!(body["error"]["message"], "invalid model");
        assert_eq!(body["error"]["param"], "model");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("model_h3"))
        );
    }

    #[test]
    fn vendor_body_shape() {
        let err = ApiError::field(
            ErrorCode::InvalidRequest,
            "max_tokens",
            "max_tokens: must be >= 1",
        );
        let body = err.vendor_body("req_1");
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["message"], "max_tokens: must be >= 1");
        assert_eq!(body["request_id"], "req_1");
        let body = ApiError::from(ErrorCode::PayloadTooLarge).vendor_body("r");
        assert_eq!(body["error"]["type"], "request_too_large");
        assert_eq!(body["error"]["message"], "Payload Too Large");
        let body = ApiError::new(ErrorCode::Unauthorized, "no key").vendor_body("r");
        assert_eq!(body["error"]["type"], "authentication_error");
        assert_eq!(body["error"]["message"], "unauthorized");
    }
}
