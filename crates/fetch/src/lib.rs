//! Reference media for the relay: fetching client-given URLs and `data:` URIs behind an SSRF
//! guard, and sniffing what the bytes are.
//!
//! - [`sniff`] / [`image_dimensions`]: pure functions over the first bytes of a file.
//! - [`Fetcher`]: http(s) GET with a whole-fetch timeout, a size limit, redirects and the
//!   guard ([`is_refused`]) applied at connect time, to every hop.
//! - [`decode_data_uri`]: `data:` URIs, base64 or percent-encoded; [`DataUriDecoder`] the same
//!   a chunk at a time, for payloads written out rather than kept.
//!
//! - [`Poster`]: http(s) POST of a JSON body (webhook deliveries), the same guard, no
//!   redirects.
//! - [`GuardedConnector`]: the guard as a connector, for other clients that fetch URLs they
//!   were handed (the channels' result downloads).
//!
//! Errors ([`FetchError`]) are safe to show a client; the server maps them, with the
//! reference's [`MediaKind`], to `invalid image` / `invalid audio` / `invalid video`
//! ([`MediaKind::invalid_code`]).
#![forbid(unsafe_code)]

mod data_uri;
mod error;
mod fetch;
mod guard;
mod post;
mod sniff;

pub use data_uri::{DataUriDecoder, decode_data_uri, is_data_uri};
pub use error::FetchError;
pub use fetch::{FETCH_USER_AGENT, FetchConfig, Fetcher, tls_config};
pub use guard::{BlockedError, GuardedConnector, Policy as GuardPolicy, is_refused};
pub use post::{POST_USER_AGENT, Poster};
pub use sniff::{Format, MediaKind, SNIFF_LEN, image_dimensions, sniff};
