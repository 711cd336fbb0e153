//! Blobs as objects in an S3-compatible store (AWS S3, MinIO, moto, ...), through the
//! `object_store` crate over our own hyper client ([`http`]).
//!
//! Writers still produce a blob into a local temporary file; `commit` streams it up (one PUT
//! up to a part's size, a multipart upload above it, a few parts in flight) and removes it.
//! Reads are streamed GETs, ranged when a range is asked for, pinned to the object's ETag
//! seen when it was opened.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::signer::{SignedUrlOptions, Signer};
use object_store::{
    Attribute, Attributes, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMultipartOptions,
    PutOptions, PutPayload, WriteMultipart,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::blobs::{
    Blob, BlobStore, BlobStream, ReadRange, check_id, clear_temp_dir, content_type, temp_in,
};

mod http;

/// The part size of multipart uploads unless configured otherwise; S3 wants at least 5 MiB
/// for every part but the last.
pub const DEFAULT_PART_BYTES: usize = 8 * 1024 * 1024;
/// The smallest part S3 accepts (but for the last one).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// Parts of one upload sent at the same time (memory: this many parts, plus the one filling).
const PARTS_IN_FLIGHT: usize = 2;
/// Bytes read from a temp file at a time.
const READ_CHUNK: usize = 256 * 1024;
/// The longest a presigned URL may be valid for (S3's limit).
const MAX_PRESIGN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the objects are and who we are to the store.
#[derive(Clone)]
pub struct S3Settings {
    pub bucket: String,
    /// `http(s)://host[:port]` of an S3-compatible server (path-style requests); `None`:
    /// AWS's endpoint of `region`.
    pub endpoint: Option<String>,
    pub region: String,
    /// Prepended to every key (`prefix/<blob id>`); empty: none.
    pub prefix: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// Blobs larger than this are sent as a multipart upload of parts this size.
    pub part_bytes: usize,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("prefix", &self.prefix)
            .field("part_bytes", &self.part_bytes)
            .finish_non_exhaustive()
    }
}

/// Blobs in one bucket (under an optional key prefix); temporary files in a local directory.
#[derive(Debug, Clone)]
pub struct S3Blobs {
    store: Arc<AmazonS3>,
    prefix: String,
    tmp: PathBuf,
    part_bytes: usize,
}

impl S3Blobs {
    /// A client of the bucket; temporary files go to `tmp`, emptied now (so open one
    /// `S3Blobs` per `tmp` and process). Nothing is sent to the store yet. Blocking.
    pub fn open(settings: S3Settings, tmp: &Path) -> io::Result<S3Blobs> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if settings.part_bytes < MIN_PART_BYTES {
            return Err(invalid(format!(
                "S3 part size {} is below S3's minimum of {MIN_PART_BYTES} bytes",
                settings.part_bytes
            )));
        }
        let prefix = settings.prefix.trim_matches('/').to_owned();
        if !prefix.is_empty() {
            check_id(&prefix).map_err(|e| invalid(format!("S3 key prefix: {e}")))?;
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&settings.bucket)
            .with_region(&settings.region)
            .with_access_key_id(&settings.access_key_id)
            .with_secret_access_key(&settings.secret_access_key)
            .with_http_connector(http::HyperConnector);
        if let Some(token) = &settings.session_token {
            builder = builder.with_token(token);
        }
        if let Some(endpoint) = &settings.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let store = builder
            .build()
            .map_err(|e| invalid(format!("S3 bucket {}: {e}", settings.bucket)))?;
        clear_temp_dir(tmp)?;
        Ok(S3Blobs {
            store: Arc::new(store),
            prefix,
            tmp: tmp.to_owned(),
            part_bytes: settings.part_bytes,
        })
    }

    /// The object key of blob (or prefix) `id`.
    fn key(&self, id: &str) -> io::Result<Key> {
        check_id(id)?;
        let full = if self.prefix.is_empty() {
            id.to_owned()
        } else {
            format!("{}/{id}", self.prefix)
        };
        Key::parse(&full).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("blob id {id:?}: not an object key: {e}"),
            )
        })
    }

    /// Streams `temp` up as `key`: one PUT when it fits in a part, else a multipart upload.
    async fn upload(&self, temp: &Path, key: &Key) -> io::Result<u64> {
        let mut file = tokio::fs::File::open(temp).await?;
        let len = file.metadata().await?.len();
        if len <= self.part_bytes as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf).await?;
            let sent = buf.len() as u64;
            self.store
                .put_opts(key, PutPayload::from(buf), put_options(key))
                .await
                .map_err(|e| store_error("PUT", key, e))?;
            return Ok(sent);
        }
        let options = PutMultipartOptions {
            attributes: attributes(key),
            ..Default::default()
        };
        let upload = self
            .store
            .put_multipart_opts(key, options)
            .await
            .map_err(|e| store_error("starting a multipart upload of", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.part_bytes);
        let mut sent: u64 = 0;
        loop {
            let mut buf = BytesMut::with_capacity(READ_CHUNK);
            let read = match file.read_buf(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    abort(writer, key).await;
                    return Err(e);
                }
            };
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                abort(writer, key).await;
                return Err(store_error("uploading a part of", key, e));
            }
            writer.put(buf.freeze());
            sent += read as u64;
        }
        writer
            .finish()
            .await
            .map_err(|e| store_error("completing the multipart upload of", key, e))?;
        Ok(sent)
    }
}

/// An object's attributes: its media type by its name, so that presigned URLs serve it right.
fn attributes(key: &Key) -> Attributes {
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::ContentType, content_type(key.as_ref()).into());
    attributes
}

fn put_options(key: &Key) -> PutOptions {
    PutOptions {
        attributes: attributes(key),
        ..Default::default()
    }
}

/// Gives up a multipart upload so that its parts do not linger in the bucket.
async fn abort(writer: WriteMultipart, key: &Key) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(key = %key, error = %e, "aborting a multipart upload");
    }
}

/// An object store error as an `io::Error` that names the operation and the key; a missing
/// object stays [`io::ErrorKind::NotFound`].
fn store_error(op: &str, key: &Key, e: object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("S3 {op} {key}: {e}"))
}

#[async_trait]
impl BlobStore for S3Blobs {
    fn temp_path(&self) -> PathBuf {
        temp_in(&self.tmp)
    }

    async fn commit(&self, temp: &Path, id: &str) -> io::Result<u64> {
        let key = self.key(id)?;
        let len = self.upload(temp, &key).await?;
        if let Err(e) = tokio::fs::remove_file(temp).await {
            // Stored already; the temp file goes at the next start at the latest.
            tracing::warn!(path = %temp.display(), error = %e, "removing an uploaded temp file");
        }
        Ok(len)
    }

    async fn put_bytes(&self, id: &str, bytes: Bytes) -> io::Result<u64> {
        let key = self.key(id)?;
        let len = bytes.len() as u64;
        self.store
            .put_opts(&key, PutPayload::from(bytes), put_options(&key))
            .await
            .map_err(|e| store_error("PUT", &key, e))?;
        Ok(len)
    }

    async fn open(&self, id: &str) -> io::Result<Blob> {
        let key = self.key(id)?;
        let meta = self
            .store
            .head(&key)
            .await
            .map_err(|e| store_error("HEAD", &key, e))?;
        Ok(Blob::new(
            meta.size,
            Box::new(S3Read {
                store: self.store.clone(),
                key,
                e_tag: meta.e_tag,
            }),
        ))
    }

    async fn open_file(&self, id: &str) -> io::Result<(std::fs::File, u64)> {
        let key = self.key(id)?;
        let got = self
            .store
            .get(&key)
            .await
            .map_err(|e| store_error("GET", &key, e))?;
        let temp = self.temp_path();
        let downloaded = async {
            let mut file = tokio::fs::File::create(&temp).await?;
            let mut stream = got.into_stream();
            let mut len: u64 = 0;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| store_error("GET", &key, e))?;
                file.write_all(&chunk).await?;
                len += chunk.len() as u64;
            }
            file.flush().await?;
            drop(file);
            let read = std::fs::File::open(&temp)?;
            Ok::<_, io::Error>((read, len))
        }
        .await;
        // Open (or failed): the name is not needed any more; an open handle keeps the bytes.
        if let Err(e) = tokio::fs::remove_file(&temp).await
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %temp.display(), error = %e, "removing a downloaded temp file");
        }
        downloaded
    }

    async fn delete(&self, id: &str) -> io::Result<()> {
        let key = self.key(id)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("DELETE", &key, e)),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> io::Result<()> {
        // Listing is by whole segments: `a/video_1` lists `a/video_1/...`, not `a/video_10`.
        let key = self.key(prefix)?;
        let locations = self
            .store
            .list(Some(&key))
            .map_ok(|meta| meta.location)
            .boxed();
        self.store
            .delete_stream(locations)
            .try_for_each(|_| async { Ok(()) })
            .await
            .or_else(|e| match e {
                object_store::Error::NotFound { .. } => Ok(()),
                e => Err(store_error("deleting the objects under", &key, e)),
            })
    }

    async fn presigned_get(
        &self,
        id: &str,
        ttl: Duration,
        content_type: &str,
        disposition: &str,
    ) -> io::Result<Option<String>> {
        let key = self.key(id)?;
        let options = SignedUrlOptions::new().with_query([
            ("response-content-type", content_type),
            ("response-content-disposition", disposition),
        ]);
        let url = self
            .store
            .signed_url_opts(
                object_store::signer::Method::GET,
                &key,
                ttl.min(MAX_PRESIGN),
                &options,
            )
            .await
            .map_err(|e| store_error("presigning a GET of", &key, e))?;
        Ok(Some(url.to_string()))
    }
}

/// An opened object: ranged GETs, only of the version seen when it was opened.
struct S3Read {
    store: Arc<AmazonS3>,
    key: Key,
    e_tag: Option<String>,
}

#[async_trait]
impl ReadRange for S3Read {
    async fn read(self: Box<Self>, start: u64, count: u64) -> io::Result<BlobStream> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(start..start + count)),
            if_match: self.e_tag.clone(),
            ..Default::default()
        };
        let got = self
            .store
            .get_opts(&self.key, options)
            .await
            .map_err(|e| store_error("GET", &self.key, e))?;
        let key = self.key;
        Ok(got
            .into_stream()
            .map_err(move |e| store_error("reading", &key, e))
            .boxed())
    }
}
