//! Blobs as files in a local directory: temp file + fsync + rename, read straight from disk.

use std::fs::{self, File};
use std::io::{self, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use crate::blobs::{Blob, BlobStore, BlobStream, ReadRange, check_id, clear_temp_dir, temp_in};

/// Chunks read from disk at a time.
const CHUNK: usize = 64 * 1024;

/// Blobs as files under `<root>/blobs`, written through temporary files in `<root>/tmp` (same
/// file system, so the final rename is atomic).
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    dirs: Arc<Dirs>,
}

#[derive(Debug)]
struct Dirs {
    blobs: PathBuf,
    tmp: PathBuf,
}

impl LocalBlobs {
    /// Creates `root/blobs` and `root/tmp` if needed and removes temporary files left by an
    /// earlier run (so open one `LocalBlobs` per root and process). Blocking.
    pub fn open(root: &Path) -> io::Result<LocalBlobs> {
        let blobs = root.join("blobs");
        let tmp = root.join("tmp");
        fs::create_dir_all(&blobs)?;
        clear_temp_dir(&tmp)?;
        Ok(LocalBlobs {
            dirs: Arc::new(Dirs { blobs, tmp }),
        })
    }

    /// Runs `work` on this store's directories on a blocking thread.
    async fn blocking<T, F>(&self, work: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Dirs) -> io::Result<T> + Send + 'static,
    {
        let dirs = self.dirs.clone();
        tokio::task::spawn_blocking(move || work(&dirs))
            .await
            .map_err(io::Error::other)?
    }
}

impl Dirs {
    fn path_of(&self, id: &str) -> io::Result<PathBuf> {
        check_id(id)?;
        Ok(self.blobs.join(id))
    }

    /// fsyncs `temp` and renames it to blob `id`. Blocking.
    fn commit(&self, temp: &Path, id: &str) -> io::Result<u64> {
        let target = self.path_of(id)?;
        let file = File::open(temp)?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        drop(file);
        let parent = target.parent().unwrap_or(&self.blobs);
        fs::create_dir_all(parent)?;
        fs::rename(temp, &target)?;
        sync_dir(parent)?;
        Ok(len)
    }

    fn delete(&self, id: &str) -> io::Result<()> {
        let path = self.path_of(id)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        // Remove directories left empty, up to (not including) the blob root; a directory
        // that is not empty stops the walk.
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.blobs || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn delete_prefix(&self, prefix: &str) -> io::Result<()> {
        let path = self.path_of(prefix)?;
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&path),
            // A file named exactly `prefix` is not under `prefix/`.
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The blob's file and its length; a directory is not a blob. Blocking.
fn open_std(dirs: &Dirs, id: &str) -> io::Result<(File, u64)> {
    let path = dirs.path_of(id)?;
    let file = File::open(&path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("blob {id}: not a file"),
        ));
    }
    Ok((file, meta.len()))
}

#[async_trait]
impl BlobStore for LocalBlobs {
    fn temp_path(&self) -> PathBuf {
        temp_in(&self.dirs.tmp)
    }

    async fn commit(&self, temp: &Path, id: &str) -> io::Result<u64> {
        let (temp, id) = (temp.to_owned(), id.to_owned());
        self.blocking(move |dirs| dirs.commit(&temp, &id)).await
    }

    async fn put_bytes(&self, id: &str, bytes: Bytes) -> io::Result<u64> {
        check_id(id)?;
        let temp = self.temp_path();
        let id = id.to_owned();
        self.blocking(move |dirs| {
            let written = File::create(&temp)
                .and_then(|mut f| f.write_all(&bytes))
                .and_then(|()| dirs.commit(&temp, &id));
            if written.is_err() {
                // Best effort: the temp file is also removed at the next open.
                let _ = fs::remove_file(&temp);
            }
            written
        })
        .await
    }

    async fn open(&self, id: &str) -> io::Result<Blob> {
        let owned = id.to_owned();
        let (file, len) = self.blocking(move |dirs| open_std(dirs, &owned)).await?;
        Ok(Blob::new(
            len,
            Box::new(LocalRead(tokio::fs::File::from_std(file))),
        ))
    }

    async fn open_file(&self, id: &str) -> io::Result<(File, u64)> {
        let owned = id.to_owned();
        self.blocking(move |dirs| open_std(dirs, &owned)).await
    }

    async fn delete(&self, id: &str) -> io::Result<()> {
        let id = id.to_owned();
        self.blocking(move |dirs| dirs.delete(&id)).await
    }

    async fn delete_prefix(&self, prefix: &str) -> io::Result<()> {
        let prefix = prefix.to_owned();
        self.blocking(move |dirs| dirs.delete_prefix(&prefix)).await
    }
}

/// An opened local blob: seek, then stream the range from the file.
struct LocalRead(tokio::fs::File);

#[async_trait]
impl ReadRange for LocalRead {
    async fn read(self: Box<Self>, start: u64, count: u64) -> io::Result<BlobStream> {
        let mut file = self.0;
        if start > 0 {
            file.seek(SeekFrom::Start(start)).await?;
        }
        Ok(ReaderStream::with_capacity(file.take(count), CHUNK).boxed())
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Directories cannot be opened as files there; the rename itself is what we rely on.
    Ok(())
}

#[cfg(test)]
mod tests;
