//! The local directory backend: one file per blob at `<root>/<first two hex digits>/<hash>`.
//!
//! Writes go to `<root>/tmp/<random>`, are fsynced, renamed onto the final name (atomic on POSIX file systems)
//! and the shard directory is fsynced, so after `put` returns the blob survives a power cut and a reader never
//! sees a partial file. Blocking file-system calls run on tokio's blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::{BlobError, BlobHash, BlobInfo, BlobResult, BlobStore, verified_hash};

/// Subdirectory for in-flight writes (never listed as blobs).
const TMP_DIR: &str = "tmp";

/// Age after which a part file in [`TMP_DIR`] is a leftover of a crashed write (no write takes this long),
/// removed when the store is opened.
const STALE_PART: Duration = Duration::from_secs(3600);

/// Blobs as files under one root directory.
#[derive(Debug, Clone)]
pub struct DirBlobStore {
    root: PathBuf,
}

impl DirBlobStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: impl Into<PathBuf>) -> BlobResult<Self> {
        let root = root.into();
        fs::create_dir_all(root.join(TMP_DIR))?;
        sync_dir(&root)?;
        remove_stale_parts(&root.join(TMP_DIR), STALE_PART)?;
        Ok(Self { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn shard(&self, hash: &BlobHash) -> PathBuf {
        self.root.join(&hash.as_str()[..2])
    }

    fn path(&self, hash: &BlobHash) -> PathBuf {
        self.shard(hash).join(hash.as_str())
    }

    /// Runs blocking file-system work off the async workers.
    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> BlobResult<T> + Send + 'static,
    ) -> BlobResult<T> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| BlobError::Io(io::Error::other(e)))?
    }
}

/// Fsyncs a directory so a rename or a new entry in it is durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes part files older than `age` (left by a write that crashed before its rename).
fn remove_stale_parts(tmp: &Path, age: Duration) -> io::Result<()> {
    let now = SystemTime::now();
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|a| a >= age));
        if old {
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

fn write_blob(root: &Path, shard: &Path, path: &Path, bytes: &[u8]) -> BlobResult<()> {
    if let Ok(file) = OpenOptions::new().write(true).open(path) {
        // Already stored (dedup): refresh its time so the sweeper's grace period starts again.
        file.set_modified(SystemTime::now())?;
        return Ok(());
    }
    if !shard.exists() {
        fs::create_dir_all(shard)?;
        sync_dir(root)?;
    }
    let tmp = root
        .join(TMP_DIR)
        .join(format!("{}.part", uuid::Uuid::new_v4().simple()));
    let written = (|| -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(shard)
    })();
    if written.is_err() {
        // Best effort: a leftover part file is harmless (never listed) but wastes space.
        let _ = fs::remove_file(&tmp);
    }
    Ok(written?)
}

fn list_blobs(root: &Path) -> BlobResult<Vec<BlobInfo>> {
    let mut out = Vec::new();
    for shard in fs::read_dir(root)? {
        let shard = shard?;
        let name = shard.file_name();
        let is_shard = name.len() == 2 && shard.file_type()?.is_dir();
        if !is_shard {
            continue;
        }
        for entry in fs::read_dir(shard.path())? {
            let entry = entry?;
            let Some(hash) = entry
                .file_name()
                .to_str()
                .and_then(|n| BlobHash::parse(n).ok())
            else {
                continue;
            };
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                // Deleted between the directory read and the stat: not a blob any more.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            out.push(BlobInfo {
                hash,
                size: meta.len(),
                modified: meta.modified()?,
            });
        }
    }
    Ok(out)
}

#[async_trait]
impl BlobStore for DirBlobStore {
    async fn put(&self, bytes: Bytes, expected: Option<&BlobHash>) -> BlobResult<BlobHash> {
        let hash = verified_hash(&bytes, expected)?;
        let (root, shard, path) = (self.root.clone(), self.shard(&hash), self.path(&hash));
        Self::blocking(move || write_blob(&root, &shard, &path, &bytes)).await?;
        Ok(hash)
    }

    async fn get(&self, hash: &BlobHash) -> BlobResult<Bytes> {
        match tokio::fs::read(self.path(hash)).await {
            Ok(bytes) => Ok(Bytes::from(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(BlobError::NotFound(hash.clone())),
            Err(e) => Err(e.into()),
        }
    }

    async fn stat(&self, hash: &BlobHash) -> BlobResult<Option<BlobInfo>> {
        match tokio::fs::metadata(self.path(hash)).await {
            Ok(meta) => Ok(Some(BlobInfo {
                hash: hash.clone(),
                size: meta.len(),
                modified: meta.modified()?,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, hash: &BlobHash) -> BlobResult<()> {
        match tokio::fs::remove_file(self.path(hash)).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn list(&self) -> BlobResult<Vec<BlobInfo>> {
        let root = self.root.clone();
        Self::blocking(move || list_blobs(&root)).await
    }
}
