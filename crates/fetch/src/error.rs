//! Why a fetch failed, in words safe to show a client.

/// Why a fetch failed. The messages are safe to show a client: they may name the URL's host,
/// never an address it resolved to or an internal error.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Not an http(s) URL or `data:` URI, or a malformed one; the reason is safe to show.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// The host is, or resolves only to, an address the guard refuses.
    #[error("{host} resolves to an address the relay does not fetch from")]
    Blocked { host: String },
    #[error("fetch timed out")]
    Timeout,
    /// The final answer was not 2xx (the status is the upstream's, not ours).
    #[error("fetch answered HTTP status {0}")]
    Status(u16),
    #[error("response is too large")]
    TooLarge,
    /// DNS failure, connection refused or reset, TLS failure; carries the host.
    #[error("cannot connect to {0}")]
    Connect(String),
    /// The connection worked but the HTTP exchange or the body did not; carries the host.
    #[error("bad HTTP response from {0}")]
    Http(String),
    #[error("too many redirects")]
    TooManyRedirects,
}
