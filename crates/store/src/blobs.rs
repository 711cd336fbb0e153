//! Blobs (videos, images): files written once, atomically, then read as streams.
//!
//! A blob id is a relative path such as `video_01J.../video.mp4`. Ids are checked before any
//! file system or object store call, so no id can name a file outside the blob area.
//!
//! Writers produce a blob into a local temporary file ([`BlobStore::temp_path`]) and hand it
//! over with [`BlobStore::commit`]; readers get a [`Blob`]: its length, and its bytes (all of
//! them or a range) as a stream of chunks. No backend holds a whole blob in memory.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;

/// The bytes of a blob (or of a range of it), a chunk at a time.
pub type BlobStream = BoxStream<'static, io::Result<Bytes>>;

/// Where blobs live: a local directory ([`crate::LocalBlobs`]) or an S3-compatible object
/// store ([`crate::S3Blobs`]). Every method that may block or wait on the network is async;
/// the local backend runs its file system work (fsync, rename, removal) on tokio's blocking
/// threads.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// A fresh local temporary path, to write a new blob into before `commit`.
    fn temp_path(&self) -> PathBuf;
    /// Keeps the finished temp file as blob `id` (replacing an older one atomically) and
    /// removes the temp file; returns the blob's length.
    async fn commit(&self, temp: &Path, id: &str) -> io::Result<u64>;
    /// Writes a whole blob atomically.
    async fn put_bytes(&self, id: &str, bytes: Bytes) -> io::Result<u64>;
    /// Opens blob `id` for reading: its length now, its bytes when [`Blob::read`] asks. A
    /// missing blob is [`io::ErrorKind::NotFound`].
    async fn open(&self, id: &str) -> io::Result<Blob>;
    /// Blob `id` as a local file, for code that reads with blocking calls (decoders,
    /// probes), with its length. A remote backend downloads it (streamed) into a temporary
    /// file that is gone once the returned handle is closed.
    async fn open_file(&self, id: &str) -> io::Result<(std::fs::File, u64)>;
    /// Removes a blob; a missing one is not an error.
    async fn delete(&self, id: &str) -> io::Result<()>;
    /// Removes every blob whose id starts with `prefix/` (e.g. all files of one task).
    async fn delete_prefix(&self, prefix: &str) -> io::Result<()>;
    /// A URL at which a client can GET blob `id` for `ttl`, served as `content_type` with
    /// `disposition` as its `Content-Disposition`, without the relay in the way; `None` where
    /// the backend has no such URLs (a local directory).
    async fn presigned_get(
        &self,
        id: &str,
        ttl: Duration,
        content_type: &str,
        disposition: &str,
    ) -> io::Result<Option<String>> {
        let _ = (id, ttl, content_type, disposition);
        Ok(None)
    }
}

/// Reads a range of one opened blob; each backend has its own.
#[async_trait]
pub trait ReadRange: Send {
    /// `count` bytes from `start` (both within the blob's length) as a stream.
    async fn read(self: Box<Self>, start: u64, count: u64) -> io::Result<BlobStream>;
}

/// An opened blob: its length, and its bytes on demand.
pub struct Blob {
    len: u64,
    reader: Box<dyn ReadRange>,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blob").field("len", &self.len).finish()
    }
}

impl Blob {
    pub fn new(len: u64, reader: Box<dyn ReadRange>) -> Blob {
        Blob { len, reader }
    }

    /// The blob's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `count` bytes from `start`; a range past the end is [`io::ErrorKind::InvalidInput`].
    pub async fn read(self, start: u64, count: u64) -> io::Result<BlobStream> {
        if start.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "range of {count} bytes from {start} is outside the blob's {} bytes",
                    self.len
                ),
            ));
        }
        if count == 0 {
            return Ok(Box::pin(futures_util::stream::empty()));
        }
        self.reader.read(start, count).await
    }

    /// All of the blob's bytes.
    pub async fn read_all(self) -> io::Result<BlobStream> {
        let len = self.len;
        self.read(0, len).await
    }
}

/// The media type of a blob by its name's ending (blobs are stored under their sniffed
/// type's extension), `application/octet-stream` for any other.
pub fn content_type(id: &str) -> &'static str {
    match id.rsplit('.').next().unwrap_or_default() {
        "mp4" => "video/mp4",
        "mov" => "video/quicktime",
        "png" => "image/png",
        "jpeg" | "jpg" => "image/jpeg",
        "webp" => "image/webp",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "m4a" => "audio/mp4",
        _ => "application/octet-stream",
    }
}

/// Accepts relative ids made of `[A-Za-z0-9._-]` segments separated by `/`, with no empty,
/// `.` or `..` segment and no `..` anywhere.
pub(crate) fn check_id(id: &str) -> io::Result<()> {
    let refuse = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("blob id {id:?}: {why}"),
        ))
    };
    if id.is_empty() {
        return refuse("empty");
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-')))
    {
        return refuse(&format!("character {c:?} not allowed"));
    }
    if id.contains("..") {
        return refuse("contains `..`");
    }
    if id.split('/').any(|seg| seg.is_empty() || seg == ".") {
        return refuse("absolute, or an empty or `.` segment");
    }
    Ok(())
}

/// Removes every file and directory in `tmp` (temporary files an earlier run left behind).
pub(crate) fn clear_temp_dir(tmp: &Path) -> io::Result<()> {
    std::fs::create_dir_all(tmp)?;
    for entry in std::fs::read_dir(tmp)? {
        let entry = entry?;
        let path = entry.path();
        let removed = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove stale temp file");
        }
    }
    Ok(())
}

/// A fresh temporary file name in `tmp`.
pub(crate) fn temp_in(tmp: &Path) -> PathBuf {
    tmp.join(format!("{}.tmp", ulid::Ulid::new()))
}
