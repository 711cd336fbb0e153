//! Idempotency records: the answer a request with an `Idempotency-Key` got, kept per API key
//! so that a retry of the same request gets it again instead of running twice.
//!
//! A record is claimed (written `pending`, with the claimant's token) before the request does
//! anything, completed with its answer (in the same transaction as the task it created, for a
//! task), or released when its answer should not be kept. The rules of a claim are here, in
//! [`decide`], so that every backend applies the same ones in its own transaction.

use serde::{Deserialize, Serialize};

/// How long a record is kept: older ones are ignored, and removed by
/// [`crate::Store::sweep_idempotency`].
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// How long a `pending` record holds its key: past it, the claimant is taken for dead (its
/// process stopped) and a new claim takes the key over.
pub const IDEMPOTENCY_PENDING_MS: u64 = 60 * 1000;

/// Who claims a key: the API key, the client's `Idempotency-Key`, and a token the claimant
/// mints, which the steps after the claim must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemTicket {
    pub key_id: String,
    pub key: String,
    pub token: String,
}

/// An answer as kept: status, content type and body (JSON text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdemAnswer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// One key's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdemRecord {
    pub key_id: String,
    pub key: String,
    /// The claimant's token.
    pub token: String,
    /// What identifies the request (the hex SHA-256 of its method, path and body).
    pub fingerprint: String,
    /// When the key was claimed, in ms since the epoch.
    pub created_ms: u64,
    /// The answer; `None` while the request is being handled (`pending`).
    pub answer: Option<IdemAnswer>,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemClaim {
    /// The key is the caller's now: handle the request.
    Claimed,
    /// The same request was answered: this is its answer.
    Replay(IdemAnswer),
    /// The key was used with another request.
    Mismatch,
    /// The same request is still being handled.
    InFlight,
}

/// What a claim does, given the record under the key (if any).
pub(crate) enum Decision {
    /// Write this (pending) record, replacing any record there.
    Write(IdemRecord),
    /// Write nothing; answer this.
    Answer(IdemClaim),
}

/// The rules of a claim: an expired record, or a pending one past
/// [`IDEMPOTENCY_PENDING_MS`], is as good as none; otherwise another request is a mismatch,
/// and the same one is in flight or replayed.
pub(crate) fn decide(
    existing: Option<&IdemRecord>,
    ticket: &IdemTicket,
    fingerprint: &str,
    now_ms: u64,
) -> Decision {
    let live = existing.filter(|r| {
        r.created_ms.saturating_add(IDEMPOTENCY_TTL_MS) > now_ms
            && (r.answer.is_some() || r.created_ms.saturating_add(IDEMPOTENCY_PENDING_MS) > now_ms)
    });
    match live {
        None => Decision::Write(IdemRecord {
            key_id: ticket.key_id.clone(),
            key: ticket.key.clone(),
            token: ticket.token.clone(),
            fingerprint: fingerprint.to_owned(),
            created_ms: now_ms,
            answer: None,
        }),
        Some(r) if r.fingerprint != fingerprint => Decision::Answer(IdemClaim::Mismatch),
        Some(r) => match &r.answer {
            Some(answer) => Decision::Answer(IdemClaim::Replay(answer.clone())),
            None => Decision::Answer(IdemClaim::InFlight),
        },
    }
}

/// Whether `record` is still the pending claim of `ticket` (what completing or releasing it
/// requires).
pub(crate) fn held_by(record: Option<&IdemRecord>, ticket: &IdemTicket) -> bool {
    record.is_some_and(|r| r.token == ticket.token && r.answer.is_none())
}
