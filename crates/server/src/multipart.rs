//! Streaming `multipart/form-data` reading: text parts in memory, file parts to temporary
//! files (never a whole upload in memory), with the body limits of CONTRACT §4.3.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use error_codes::{ApiError, ErrorCode};
use futures_util::stream;
use http_body_util::BodyExt;
use store::BlobStore;
use tokio::io::AsyncWriteExt;
use videos_v1::{FieldValue, FilePart};

use crate::http::too_large;

/// First bytes of an uploaded file kept in memory, enough to sniff it.
pub const PREFIX_BYTES: usize = 64 * 1024;
/// A text part larger than this is refused (prompts are at most 10,000 characters).
const MAX_TEXT_PART: usize = 1024 * 1024;

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
    /// Commits upload `index` as blob `id`.
    pub fn commit(
        &mut self,
        index: usize,
        blobs: &dyn BlobStore,
        id: &str,
    ) -> std::io::Result<u64> {
        let upload = self
            .0
            .get_mut(index)
            .ok_or_else(|| std::io::Error::other("no such upload"))?;
        let len = blobs.commit(&upload.path, id)?;
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
    limit: u64,
    blobs: &Arc<dyn BlobStore>,
) -> Result<(Vec<(String, FieldValue)>, Uploads), ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let boundary = multer::parse_boundary(content_type).map_err(bad_multipart)?;
    let hard = limit.saturating_mul(4);
    if body.size_hint().lower() > hard {
        return Err(too_large());
    }
    let total = Arc::new(AtomicU64::new(0));
    let counted = total.clone();
    let body_stream = stream::unfold(Some(body), move |state| {
        let counted = counted.clone();
        async move {
            let mut body = state?;
            loop {
                match body.frame().await {
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
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(_) if over(&total) => return Err(too_large()),
            Err(e) => return Err(bad_multipart(e)),
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
            let path = blobs.temp_path();
            let mut file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("upload: {e}")))?;
            // Registered before writing, so an early error still removes the file.
            uploads.0.push(Upload {
                path: path.clone(),
                prefix: Bytes::new(),
                len: 0,
                committed: false,
            });
            let mut prefix = Vec::new();
            let mut len: u64 = 0;
            loop {
                let chunk = match field.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(_) if over(&total) => return Err(too_large()),
                    Err(e) => return Err(bad_multipart(e)),
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
            let index = uploads.0.len() - 1;
            if let Some(upload) = uploads.0.last_mut() {
                upload.prefix = Bytes::from(prefix);
                upload.len = len;
            }
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
            let mut text = Vec::new();
            loop {
                let chunk = match field.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(_) if over(&total) => return Err(too_large()),
                    Err(e) => return Err(bad_multipart(e)),
                };
                text.extend_from_slice(&chunk);
                if text.len() > MAX_TEXT_PART {
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
