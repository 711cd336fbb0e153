//! Blobs (videos, images): files written once, atomically, then read.
//!
//! A blob id is a relative path such as `video_01J.../video.mp4`. Ids are checked before any
//! file system call, so no id can name a file outside the blob area.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Where blobs live.
pub trait BlobStore: Send + Sync + 'static {
    /// A fresh temporary path inside the blob area, to write a new blob into before `commit`.
    fn temp_path(&self) -> PathBuf;
    /// fsyncs the temp file and atomically renames it to blob `id`; returns its length.
    fn commit(&self, temp: &Path, id: &str) -> io::Result<u64>;
    /// Writes a whole blob atomically (temp file + fsync + rename).
    fn put_bytes(&self, id: &str, bytes: &[u8]) -> io::Result<u64>;
    /// Opens a blob for reading, with its length.
    fn open(&self, id: &str) -> io::Result<(File, u64)>;
    /// Removes a blob; a missing one is not an error.
    fn delete(&self, id: &str) -> io::Result<()>;
    /// Removes every blob whose id starts with `prefix/` (e.g. all files of one task).
    fn delete_prefix(&self, prefix: &str) -> io::Result<()>;
}

/// Blobs as files under `<root>/blobs`, written through temporary files in `<root>/tmp` (same
/// file system, so the final rename is atomic).
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    blobs: PathBuf,
    tmp: PathBuf,
}

impl LocalBlobs {
    /// Creates `root/blobs` and `root/tmp` if needed and removes temporary files left by an
    /// earlier run (so open one `LocalBlobs` per root and process).
    pub fn open(root: &Path) -> io::Result<LocalBlobs> {
        let blobs = root.join("blobs");
        let tmp = root.join("tmp");
        fs::create_dir_all(&blobs)?;
        fs::create_dir_all(&tmp)?;
        for entry in fs::read_dir(&tmp)? {
            let entry = entry?;
            let path = entry.path();
            let removed = if entry.file_type()?.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            if let Err(e) = removed {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove stale temp file");
            }
        }
        Ok(LocalBlobs { blobs, tmp })
    }

    fn path_of(&self, id: &str) -> io::Result<PathBuf> {
        check_id(id)?;
        Ok(self.blobs.join(id))
    }
}

impl BlobStore for LocalBlobs {
    fn temp_path(&self) -> PathBuf {
        self.tmp.join(format!("{}.tmp", ulid::Ulid::new()))
    }

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

    fn put_bytes(&self, id: &str, bytes: &[u8]) -> io::Result<u64> {
        check_id(id)?;
        let temp = self.temp_path();
        let written = File::create(&temp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| self.commit(&temp, id));
        if written.is_err() {
            // Best effort: the temp file is also removed at the next open.
            let _ = fs::remove_file(&temp);
        }
        written
    }

    fn open(&self, id: &str) -> io::Result<(File, u64)> {
        let path = self.path_of(id)?;
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

/// Accepts relative ids made of `[A-Za-z0-9._-]` segments separated by `/`, with no empty,
/// `.` or `..` segment and no `..` anywhere.
fn check_id(id: &str) -> io::Result<()> {
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
