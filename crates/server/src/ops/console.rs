//! The web console: static files under `crates/server/console/`, embedded in the binary and
//! served at `/console` without a credential (the page holds no secret; the person types a key
//! or the admin token into it, and the page sends that to the API itself).

use std::sync::OnceLock;

use error_codes::{ApiError, ErrorCode};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use sha2::{Digest, Sha256};

use crate::ground::http::{Answer, empty, error, full};

/// One embedded file: its name under `/console/`, its media type and its bytes.
struct File {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

macro_rules! embed {
    ($name:literal, $type:expr) => {
        File {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../console/", $name)),
        }
    };
}

/// Every file of the console; `index.html` is also served at `/console` and `/console/`.
const FILES: &[File] = &[
    embed!("index.html", "text/html; charset=utf-8"),
    embed!("console.css", "text/css; charset=utf-8"),
    embed!("icon.svg", "image/svg+xml"),
    embed!("app.js", JS),
    embed!("api.js", JS),
    embed!("ui.js", JS),
    embed!("playground.js", JS),
    embed!("assets.js", JS),
    embed!("chat.js", JS),
    embed!("keys.js", JS),
    embed!("tasks.js", JS),
    embed!("channels.js", JS),
    embed!("metrics.js", JS),
];

/// The page loads nothing but its own files, talks to nothing but its own origin, and plays
/// and shows videos and images it fetched itself (`blob:` URLs).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The files change only with the binary: a client may keep them, but asks each time whether
/// they are still current (the `ETag` makes that a `304`).
const CACHE_CONTROL: &str = "no-cache";

/// Each file's `ETag`, in the order of [`FILES`]: a quoted prefix of its SHA-256.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|f| {
                let digest = Sha256::digest(f.body);
                let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// `GET /console/<name>` (the page itself is `index.html`).
pub fn serve(name: &str, request_headers: &HeaderMap) -> Answer {
    let Some((index, file)) = FILES.iter().enumerate().find(|(_, f)| f.name == name) else {
        return error(&ApiError::new(
            ErrorCode::NotFound,
            "the console has no such file",
        ));
    };
    let etag = etags().get(index).map(String::as_str).unwrap_or_default();
    let fresh = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut res = if fresh {
        let mut res = Response::new(empty());
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        res
    } else {
        let mut res = Response::new(full(file.body));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(file.content_type),
        );
        res
    };
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_named_once_and_has_a_body() {
        let mut names: Vec<_> = FILES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FILES.len());
        assert!(FILES.iter().all(|f| !f.body.is_empty()));
        assert_eq!(etags().len(), FILES.len());
    }

    /// Every file the page or a module names is embedded: a `src`/`href` of the page and each
    /// module's `import ... from './x.js'`.
    #[test]
    fn every_referenced_file_is_embedded() {
        let embedded = |name: &str| FILES.iter().any(|f| f.name == name);
        for file in FILES {
            let Ok(text) = std::str::from_utf8(file.body) else {
                continue;
            };
            for piece in text.split(['"', '\'']) {
                let name = piece
                    .strip_prefix("/console/")
                    .or_else(|| piece.strip_prefix("./"));
                if let Some(name) = name.filter(|n| n.ends_with(".js") || n.ends_with(".css")) {
                    assert!(embedded(name), "{} names {name}, not embedded", file.name);
                }
            }
        }
    }
}
