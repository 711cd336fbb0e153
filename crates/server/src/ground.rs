//! What every handler stands on, importing nothing above it but the configuration: bodies,
//! answers and errors ([`http`]), keys and the admin token ([`auth`]), rate limits
//! ([`limits`]), the throttle of failed authentication ([`auth_throttle`]), the state relays
//! share through Redis ([`cluster`]), signed file links ([`signed`]) and serving stored blobs
//! ([`content`]), multipart reading ([`multipart`]), webhook signatures ([`webhook_signing`]),
//! fingerprints of names ([`fingerprint`]), the cache of rendered task records
//! ([`record_cache`]) and chat billing's in-memory ledger ([`chat_ledger`]).

pub mod auth;
pub mod auth_throttle;
pub mod chat_ledger;
pub mod cluster;
pub mod content;
pub mod fingerprint;
pub mod http;
pub mod limits;
pub mod multipart;
pub mod record_cache;
pub mod signed;
pub mod webhook_signing;
