//! The first format's media checks: image frames fetched, decoded or read from a file part
//! and sniffed; audio and video references checked and kept as the relay's copies
//! (CONTRACT §1.1); and the files a task being created keeps, removed again unless it is stored.

use std::sync::Arc;

use bytes::Bytes;
use error_codes::{ApiError, ErrorCode};
use fetch::{FetchError, Format, MediaKind};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use videos_v1::Media;

use crate::app::App;
use crate::ground::multipart::{self, Uploads};

/// A checked image: its bytes, its format and its dimensions.
pub struct CheckedMedia {
    pub bytes: Option<Bytes>,
    pub format: Format,
    pub dims: Option<(u32, u32)>,
}

fn kind_error(kind: MediaKind) -> (ErrorCode, &'static str) {
    match kind {
        MediaKind::Image => (ErrorCode::InvalidImage, "jpeg, png or webp"),
        MediaKind::Audio => (ErrorCode::InvalidAudio, "mp3, wav or m4a"),
        MediaKind::Video => (ErrorCode::InvalidVideo, "mp4 or mov"),
    }
}

/// The field's own error (CONTRACT §1.1), its detail naming the field and what it accepts.
fn field_error(kind: MediaKind, field: &str, why: &str) -> ApiError {
    let (code, accepted) = kind_error(kind);
    ApiError::field(code, field, format!("{field} {why}; accepted: {accepted}"))
}

/// The format of a reference of `kind` by its first bytes.
fn sniffed(prefix: &[u8], kind: MediaKind) -> Option<Format> {
    fetch::sniff(prefix).filter(|f| f.kind() == kind)
}

/// Fetches (or reads) an image reference and sniffs it (CONTRACT §1.1: unreachable or of the
/// wrong format is the field's own error). Images are read whole, at most `max_image_bytes`.
pub async fn image(
    app: &App,
    media: &Media,
    field: &str,
    uploads: &Uploads,
) -> Result<CheckedMedia, ApiError> {
    let max_image = app.config.security.max_image_bytes;
    let fail = |why: String| field_error(MediaKind::Image, field, &why);
    let (bytes, whole) = match media {
        Media::Url(url) => {
            let bytes = app
                .fetcher
                .fetch(url, max_image)
                .await
                .map_err(|e| fail(format!("could not be fetched: {e}")))?;
            (bytes, true)
        }
        Media::DataUri(uri) => {
            let bytes = fetch::decode_data_uri(uri, max_image)
                .map_err(|e| fail(format!("is not a usable data: URI: {e}")))?;
            (Bytes::from(bytes), true)
        }
        Media::File(index) => {
            let upload = uploads
                .0
                .get(*index)
                .ok_or_else(|| fail("upload is missing".into()))?;
            if upload.len > max_image {
                return Err(fail(format!("is larger than {max_image} bytes")));
            }
            (upload.prefix.clone(), false)
        }
    };
    let format = sniffed(&bytes, MediaKind::Image)
        .ok_or_else(|| fail("is not in a supported format".into()))?;
    let dims =
        fetch::image_dimensions(&bytes).ok_or_else(|| fail("has no readable dimensions".into()))?;
    Ok(CheckedMedia {
        bytes: whole.then_some(bytes),
        format,
        dims: Some(dims),
    })
}

/// A checked audio or video reference: a URL the upstream fetches itself, or an upload (a file
/// part, or a decoded `data:` URI) that becomes the relay's copy.
pub enum CheckedReference {
    Url(String),
    Upload { index: usize, format: Format },
}

/// Checks an audio or video reference (CONTRACT §1.1: unreachable or of the wrong format is
/// the field's own error). A URL's first 64 KiB are fetched to sniff it; a file part is
/// sniffed from the start it was streamed to disk with (it is at most `max_upload_bytes`,
/// with the whole body); a `data:` URI (at most `max_body_bytes` decoded, as the body that
/// carried it) is decoded to a temporary file.
pub async fn reference(
    app: &App,
    media: Media,
    kind: MediaKind,
    field: &str,
    uploads: &mut Uploads,
) -> Result<CheckedReference, ApiError> {
    let fail = |why: String| field_error(kind, field, &why);
    let index = match media {
        Media::Url(url) => {
            let prefix = app
                .fetcher
                .fetch_prefix(&url, multipart::PREFIX_BYTES)
                .await
                .map_err(|e| fail(format!("could not be fetched: {e}")))?;
            sniffed(&prefix, kind).ok_or_else(|| fail("is not in a supported format".into()))?;
            return Ok(CheckedReference::Url(url));
        }
        Media::DataUri(uri) => data_uri_upload(app, &uri, kind, field, uploads).await?,
        Media::File(index) => index,
    };
    let upload = uploads
        .0
        .get(index)
        .ok_or_else(|| fail("upload is missing".into()))?;
    let format =
        sniffed(&upload.prefix, kind).ok_or_else(|| fail("is not in a supported format".into()))?;
    Ok(CheckedReference::Upload { index, format })
}

/// Decodes a `data:` URI reference into a new upload, a chunk at a time: its start is sniffed
/// before anything is written, and no more than that start and one chunk is held decoded.
async fn data_uri_upload(
    app: &App,
    uri: &str,
    kind: MediaKind,
    field: &str,
    uploads: &mut Uploads,
) -> Result<usize, ApiError> {
    let max = app.config.server.max_body_bytes;
    let unusable = |e: FetchError| match e {
        FetchError::TooLarge => field_error(kind, field, &format!("is larger than {max} bytes")),
        e => field_error(kind, field, &format!("is not a usable data: URI: {e}")),
    };
    let mut decoder = fetch::DataUriDecoder::new(uri, max).map_err(unusable)?;
    let mut head = Vec::new();
    while head.len() < multipart::PREFIX_BYTES
        && let Some(chunk) = decoder.next_chunk().map_err(unusable)?
    {
        head.extend_from_slice(&chunk);
    }
    if sniffed(&head, kind).is_none() {
        return Err(field_error(kind, field, "is not in a supported format"));
    }
    let io = |e: std::io::Error| {
        tracing::error!("writing the {field} reference: {e}");
        ApiError::new(
            ErrorCode::Unavailable,
            format!("the {field} reference could not be stored"),
        )
    };
    let (index, path) = uploads.begin(&*app.blobs);
    let mut file = tokio::fs::File::create(&path).await.map_err(io)?;
    file.write_all(&head).await.map_err(io)?;
    let mut len = head.len() as u64;
    while let Some(chunk) = decoder.next_chunk().map_err(unusable)? {
        file.write_all(&chunk).await.map_err(io)?;
        len += chunk.len() as u64;
    }
    file.flush().await.map_err(io)?;
    head.truncate(multipart::PREFIX_BYTES);
    uploads.finish(index, Bytes::from(head), len);
    Ok(index)
}

/// Files written for a task being created (frames, audio and video references); removed again
/// unless the task was stored.
pub struct StoredFiles {
    blobs: Arc<dyn store::BlobStore>,
    ids: Vec<String>,
    prefix: String,
}

impl StoredFiles {
    pub fn new(blobs: Arc<dyn store::BlobStore>, task_id: &str) -> StoredFiles {
        StoredFiles {
            blobs,
            ids: Vec::new(),
            prefix: task_id.to_owned(),
        }
    }

    pub async fn keep(
        &mut self,
        media: CheckedMedia,
        name: &str,
        source: &Option<Media>,
        uploads: &mut Uploads,
    ) -> Result<String, ApiError> {
        let id = format!("{}/{name}.{}", self.prefix, media.format.as_str());
        let written = match (source, media.bytes) {
            (Some(Media::File(index)), _) => uploads.commit(*index, &*self.blobs, &id).await,
            (_, Some(bytes)) => self.blobs.put_bytes(&id, bytes).await,
            (_, None) => Err(std::io::Error::other("no bytes")),
        };
        written.map_err(|e| {
            tracing::error!("storing {id}: {e}");
            ApiError::new(ErrorCode::Unavailable, "the image could not be stored")
        })?;
        self.ids.push(id.clone());
        Ok(id)
    }

    /// Keeps a checked audio or video reference: a URL as it is, an upload as the blob
    /// `<task>/<name>.<format>`. Answers (URL, blob id).
    pub async fn keep_reference(
        &mut self,
        reference: Option<CheckedReference>,
        name: &str,
        uploads: &mut Uploads,
    ) -> Result<(Option<String>, Option<String>), ApiError> {
        let (index, format) = match reference {
            None => return Ok((None, None)),
            Some(CheckedReference::Url(url)) => return Ok((Some(url), None)),
            Some(CheckedReference::Upload { index, format }) => (index, format),
        };
        let id = format!("{}/{name}.{}", self.prefix, format.as_str());
        uploads
            .commit(index, &*self.blobs, &id)
            .await
            .map_err(|e| {
                tracing::error!("storing {id}: {e}");
                ApiError::new(
                    ErrorCode::Unavailable,
                    format!("the {name} reference could not be stored"),
                )
            })?;
        self.ids.push(id);
        Ok((None, self.ids.last().cloned()))
    }

    /// Copies blob `from` (a picture of another task) as `<task>/<name>.<ext>`, streamed
    /// through a temporary file, never whole in memory. A source gone meanwhile (its task
    /// deleted) is `404 not found`.
    pub async fn copy(&mut self, from: &str, name: &str) -> Result<String, ApiError> {
        let ext = from.rsplit_once('.').map_or("bin", |(_, ext)| ext);
        let id = format!("{}/{name}.{ext}", self.prefix);
        let failed = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                return ApiError::field(
                    ErrorCode::NotFound,
                    "video",
                    "the source video's content is gone",
                );
            }
            tracing::error!("copying {from} to {id}: {e}");
            ApiError::new(
                ErrorCode::Unavailable,
                format!("the {name} could not be stored"),
            )
        };
        let mut uploads = Uploads::default();
        let (index, path) = uploads.begin(&*self.blobs);
        let written = async {
            let mut stream = self.blobs.open(from).await?.read_all().await?;
            let mut file = tokio::fs::File::create(&path).await?;
            while let Some(chunk) = stream.next().await {
                file.write_all(&chunk?).await?;
            }
            file.flush().await?;
            uploads.commit(index, &*self.blobs, &id).await
        }
        .await;
        written.map_err(failed)?;
        self.ids.push(id.clone());
        Ok(id)
    }

    pub fn keep_all(mut self) {
        self.ids.clear();
    }

    /// Removes every file kept so far (the task was refused); failures are logged.
    pub async fn remove_all(mut self) {
        for id in std::mem::take(&mut self.ids) {
            if let Err(e) = self.blobs.delete(&id).await {
                tracing::warn!("removing {id} of a refused task: {e}");
            }
        }
    }
}

impl Drop for StoredFiles {
    /// Removes the files of a task that was not stored, in the background (a drop cannot
    /// wait); a failure is logged.
    fn drop(&mut self) {
        let ids = std::mem::take(&mut self.ids);
        if ids.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no runtime to remove the files of a refused task: {ids:?}");
            return;
        };
        let blobs = self.blobs.clone();
        runtime.spawn(async move {
            for id in ids {
                if let Err(e) = blobs.delete(&id).await {
                    tracing::warn!("removing {id} of a refused task: {e}");
                }
            }
        });
    }
}
