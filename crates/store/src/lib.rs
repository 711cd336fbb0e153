//! The relay's durable state.
//!
//! [`Store`] offers whole business steps (create a task with its pre-deduction, move a task
//! from one status to another with its ledger entries), never get-then-put sequences, so that
//! each backend implements each step as one transaction. [`SledStore`] is the embedded
//! default, one process's; [`PgStore`] keeps the same records in PostgreSQL, shared by any
//! number of relay instances (claims of due work carry a lease, see [`Store::claim_due`]), and
//! migrates its schema when it connects. Blobs (videos, images) live in a [`BlobStore`]:
//! [`LocalBlobs`] is a directory, [`S3Blobs`] an S3-compatible object store; either is read
//! as a stream.
//!
//! One test suite (`suite`, tests only) runs every case against both backends.
//!
//! Nothing outside this crate names sled or PostgreSQL.
#![forbid(unsafe_code)]

mod batch;
mod blobs;
mod error;
mod idempotency;
mod local_blobs;
mod model;
mod pg_store;
mod s3_blobs;
mod sled_store;
mod steps;
#[cfg(test)]
mod suite;
#[cfg(test)]
mod test_util;

pub use batch::{
    Batch, BatchCounts, BatchItem, BatchOutcome, BatchResult, BatchResultKind, BatchStatus,
};
pub use blobs::{Blob, BlobStore, BlobStream, ReadRange, content_type};
pub use error::StoreError;
pub use idempotency::{
    IDEMPOTENCY_PENDING_MS, IDEMPOTENCY_TTL_MS, IdemAnswer, IdemClaim, IdemRecord, IdemTicket,
};
pub use local_blobs::LocalBlobs;
pub use model::*;
pub use pg_store::PgStore;
pub use s3_blobs::{DEFAULT_PART_BYTES, MIN_PART_BYTES, S3Blobs, S3Settings};
pub use sled_store::SledStore;
pub use steps::{AssetUpdate, KeyUpdate, Store, TaskUpdate};
