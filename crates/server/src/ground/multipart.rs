//! Streaming `multipart/form-data` reading: text parts in memory, file parts to temporary
//! files (never a whole upload in memory), with the body limits of CONTRACT §4.3. A text part
//! is at most 1 MiB unless its field may hold a `data:` URI; the text parts together are held
//! to the JSON body limit, so what a multipart body keeps in memory is what a JSON one may. A
//! body carries at most [`UploadLimit::files`] file parts: the next is refused `413` before its
//! temporary file is made.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use error_codes::{ApiError, ErrorCode};
use futures_util::stream;
use http_body_util::BodyExt;
use store::BlobStore;
use tokio::io::AsyncWriteExt;
use videos_v1::{FieldValue, FilePart};

use crate::ground::http::{Limit, body_stalled, too_large};

/// First bytes of an uploaded file kept in memory, enough to sniff it.
pub const PREFIX_BYTES: usize = 64 * 1024;
/// A text part larger than this is refused (prompts are at most 10,000 characters), unless
/// its field is one of [`Limits::long_text`].
const MAX_TEXT_PART: usize = 1024 * 1024;

/// What one multipart body may be: its bytes and pace, and its file parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadLimit {
    /// The whole body (`max_upload_bytes`, and how long it may stall).
    pub body: Limit,
    /// File parts it may carry (`max_upload_files`): the next is refused `413` before its
    /// temporary file is made.
    pub files: u32,
}

/// The limits of one multipart body.
#[derive(Debug, Clone, Copy)]
pub struct Limits<'a> {
    /// The whole body and its file parts.
    pub body: UploadLimit,
    /// The text parts together (`max_body_bytes`): more is `413`.
    pub text: u64,
    /// Fields whose text parts may be longer than 1 MiB (references given as `data:` URIs).
    pub long_text: &'a [&'a str],
}

/// One uploaded file, written to a temporary path.
#[derive(Debug)]
pub struct Upload {
    pub path: PathBuf,
    pub prefix: Bytes,
    pub len: u64,
    committed: bool,
}

/// The uploaded files of one request. Temporary files not committed are removed on drop, so
/// a refused request leaves nothing behind.
#[derive(Debug, Default)]
pub struct Uploads(pub Vec<Upload>);

impl Uploads {
    /// Registers a new temporary file for an upload about to be written (so that it is removed
    /// on drop, whatever happens next); its index and path.
    pub fn begin(&mut self, blobs: &dyn BlobStore) -> (usize, PathBuf) {
        let path = blobs.temp_path();
        self.0.push(Upload {
            path: path.clone(),
            prefix: Bytes::new(),
            len: 0,
            committed: false,
        });
        (self.0.len() - 1, path)
    }

    /// Records what was written to upload `index`: its first bytes and its length.
    pub fn finish(&mut self, index: usize, prefix: Bytes, len: u64) {
        if let Some(upload) = self.0.get_mut(index) {
            upload.prefix = prefix;
            upload.len = len;
        }
    }

    /// Commits upload `index` as blob `id` (the blob store syncs or uploads it off the async
    /// workers).
    pub async fn commit(
        &mut self,
        index: usize,
        blobs: &dyn BlobStore,
        id: &str,
    ) -> std::io::Result<u64> {
        let upload = self
            .0
            .get_mut(index)
            .ok_or_else(|| std::io::Error::other("no such upload"))?;
        let len = blobs.commit(&upload.path, id).await?;
        upload.committed = true;
        Ok(len)
    }
}

impl Drop for Uploads {
    fn drop(&mut self) {
        for upload in &self.0 {
            if !upload.committed {
                let _ = std::fs::remove_file(&upload.path);
            }
        }
    }
}

/// A file part past `max` of them.
fn too_many_files(name: &str, max: u32) -> ApiError {
    ApiError::field(
        ErrorCode::PayloadTooLarge,
        name,
        format!(
            "a multipart body may carry at most {max} file parts (server.max_upload_files); \
             the part {name:?} is one more"
        ),
    )
}

fn bad_multipart(e: impl std::fmt::Display) -> ApiError {
    ApiError::field(
        ErrorCode::InvalidRequest,
        "body",
        format!("the multipart body could not be read: {e}"),
    )
}

/// Reads a multipart body (a request's [`hyper::body::Incoming`] body, or any body of [`Bytes`]) into
/// fields (in arrival order) and uploads.
pub async fn read<B>(
    body: B,
    content_type: &str,
    limits: Limits<'_>,
    blobs: &Arc<dyn BlobStore>,
) -> Result<(Vec<(String, FieldValue)>, Uploads), ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let max_files = limits.body.files;
    let limit = limits.body.body;
    let boundary = multer::parse_boundary(content_type).map_err(bad_multipart)?;
    let idle = limit.idle;
    let hard = limit.hard();
    let limit = limit.bytes;
    if body.size_hint().lower() > hard {
        return Err(too_large());
    }
    let total = Arc::new(AtomicU64::new(0));
    let stalled = Arc::new(AtomicBool::new(false));
    let counted = total.clone();
    let stall_seen = stalled.clone();
    let body_stream = stream::unfold(Some(body), move |state| {
        let counted = counted.clone();
        let stall_seen = stall_seen.clone();
        async move {
            let mut body = state?;
            loop {
                let Ok(frame) = tokio::time::timeout(idle, body.frame()).await else {
                    stall_seen.store(true, Ordering::Relaxed);
                    return Some((Err(std::io::Error::other("stalled")), None));
                };
                match frame {
                    None => return None,
                    Some(Err(e)) => return Some((Err(std::io::Error::other(e)), None)),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let seen = counted.fetch_add(data.len() as u64, Ordering::Relaxed)
                                + data.len() as u64;
                            if seen > hard {
                                return Some((Err(std::io::Error::other("too large")), None));
                            }
                            return Some((Ok::<Bytes, std::io::Error>(data), Some(body)));
                        }
                    }
                }
            }
        }
    });
    let mut multipart = multer::Multipart::new(body_stream, boundary);
    let mut fields = Vec::new();
    let mut uploads = Uploads::default();
    let over = |total: &AtomicU64| total.load(Ordering::Relaxed) > hard;
    // What a body error means: the body stalled, grew past the cap, or is malformed.
    let fault = |e: multer::Error| {
        if stalled.load(Ordering::Relaxed) {
            body_stalled(idle)
        } else if over(&total) {
            too_large()
        } else {
            bad_multipart(e)
        }
    };
    // Text bytes held so far, all parts together.
    let mut text_total: u64 = 0;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(fault(e)),
        };
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(|m| m.essence_str().to_owned());
        let is_file = filename.is_some()
            || content_type
                .as_deref()
                .is_some_and(|ct| !ct.starts_with("text/plain"));
        let mut field = field;
        if is_file {
            if uploads.0.len() >= max_files as usize {
                return Err(too_many_files(&name, max_files));
            }
            // Registered before writing, so an early error still removes the file.
            let (index, path) = uploads.begin(&**blobs);
            let mut file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("upload: {e}")))?;
            let mut prefix = Vec::new();
            let mut len: u64 = 0;
            loop {
                let chunk = match field.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(e) => return Err(fault(e)),
                };
                if prefix.len() < PREFIX_BYTES {
                    let take = (PREFIX_BYTES - prefix.len()).min(chunk.len());
                    prefix.extend_from_slice(&chunk[..take]);
                }
                len += chunk.len() as u64;
                file.write_all(&chunk)
                    .await
                    .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("upload: {e}")))?;
            }
            file.flush()
                .await
                .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("upload: {e}")))?;
            uploads.finish(index, Bytes::from(prefix), len);
            fields.push((
                name,
                FieldValue::File(FilePart {
                    index,
                    filename,
                    content_type,
                    len,
                }),
            ));
        } else {
            let long = limits.long_text.contains(&name.as_str());
            let mut text = Vec::new();
            loop {
                let chunk = match field.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(e) => return Err(fault(e)),
                };
                text.extend_from_slice(&chunk);
                text_total += chunk.len() as u64;
                if text_total > limits.text {
                    return Err(too_large());
                }
                if !long && text.len() > MAX_TEXT_PART {
                    return Err(ApiError::field(
                        ErrorCode::InvalidRequest,
                        name,
                        "a text part is larger than 1 MiB",
                    ));
                }
            }
            let text = String::from_utf8(text).map_err(|_| {
                ApiError::field(
                    ErrorCode::InvalidRequest,
                    name.clone(),
                    format!("the multipart part {name:?} is not UTF-8 text"),
                )
            })?;
            fields.push((name, FieldValue::Text(text)));
        }
    }
    if total.load(Ordering::Relaxed) > limit {
        return Err(too_large());
    }
    Ok((fields, uploads))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use futures_util::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use store::LocalBlobs;

    use super::*;

    const BOUNDARY: &str = "xyz";

    fn file_parts(range: std::ops::Range<usize>) -> String {
        range
            .map(|n| {
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"f{n}\"; filename=\"{n}.png\"\r\n\
                     Content-Type: image/png\r\n\r\npart {n}\r\n"
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_body_with_more_file_parts_than_allowed_is_refused_before_the_next_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn BlobStore> = Arc::new(LocalBlobs::open(dir.path()).unwrap());
        let limits = Limits {
            body: UploadLimit {
                body: Limit {
                    bytes: 1 << 20,
                    idle: Duration::from_secs(30),
                },
                files: 16,
            },
            text: 1 << 20,
            long_text: &[],
        };
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        // Sixteen parts are read.
        let whole = format!("{}--{BOUNDARY}--\r\n", file_parts(0..16));
        let body = http_body_util::Full::new(Bytes::from(whole));
        let (fields, uploads) = read(body, &content_type, limits, &blobs).await.unwrap();
        assert_eq!((fields.len(), uploads.0.len()), (16, 16));
        drop(uploads);
        // The 17th is refused as it arrives: the 9,983 parts after it (never sent here: the
        // body waits for them forever) are not waited for, let alone written.
        let first = Bytes::from(file_parts(0..17));
        let frames = futures_util::stream::iter([Ok::<_, Infallible>(Frame::data(first))])
            .chain(futures_util::stream::pending());
        let read = read(StreamBody::new(frames), &content_type, limits, &blobs);
        let err = tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("refused without waiting for the rest")
            .unwrap_err();
        assert_eq!(err.status(), 413);
        assert_eq!(err.param.as_deref(), Some("f16"));
        assert!(
            err.detail
                .contains("at most 16 file parts (server.max_upload_files)"),
            "{}",
            err.detail
        );
        // Nothing is left behind.
        let left = std::fs::read_dir(dir.path().join("tmp")).map_or(0, |d| d.count());
        assert_eq!(left, 0);
    }
}
