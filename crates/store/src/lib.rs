//! The relay's durable state.
//!
//! [`Store`] offers whole business steps (create a task with its pre-deduction, move a task
//! from one status to another with its ledger entries), never get-then-put sequences, so that
//! another backend can implement each step as one transaction. [`SledStore`] is the embedded
//! default. Blobs (videos, images) live in a [`BlobStore`]: [`LocalBlobs`] is a directory,
//! [`S3Blobs`] an S3-compatible object store; either is read as a stream.
//!
//! Nothing outside this crate names sled.
#![forbid(unsafe_code)]

mod blobs;
mod error;
mod local_blobs;
mod model;
mod s3_blobs;
mod sled_store;
mod steps;
#[cfg(test)]
mod test_util;

pub use blobs::{Blob, BlobStore, BlobStream, ReadRange, content_type};
pub use error::StoreError;
pub use local_blobs::LocalBlobs;
pub use model::*;
pub use s3_blobs::{DEFAULT_PART_BYTES, MIN_PART_BYTES, S3Blobs, S3Settings};
pub use sled_store::SledStore;
pub use steps::Store;
