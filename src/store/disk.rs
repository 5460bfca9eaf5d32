//! What makes sled's writes survive a power cut. sled 0.34.7's `flush` ends each log write with
//! `sync_file_range` (`pagecache/iobuf.rs`; spacejam/sled#1452), which persists neither a grown
//! file's size nor the device's write cache; it writes blob files (`blobs/`, a node larger than
//! a quarter of a segment) and never syncs them, and never syncs a directory after it creates,
//! renames or removes a file in it. So after each flush the store syncs what sled wrote itself,
//! through descriptors of its own: new or grown blob files, then the directories whose entries
//! changed, then the log file (`db`). Only then is a write acknowledged.
//!
//! Blobs first: the log may point to them. Directories before the log: a snapshot renamed into
//! place must not be older on disk than the log written after it. A directory is synced only
//! when its entries changed since its last sync (a clean directory's `fsync` still flushes the
//! device's cache: ~0.1 ms here), which one `readdir` tells.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// sled's log file in its directory.
const LOG_FILE: &str = "db";
/// sled's folder of blob files in its directory.
const BLOBS_DIR: &str = "blobs";

/// Descriptors of a sled database's files, and what of them was last synced.
#[derive(Debug)]
pub struct DiskSync {
    dir: PathBuf,
    log: File,
    /// What the last sync saw; one sync at a time.
    synced: Mutex<Synced>,
}

/// The entries of the database's directory and the blob files with their lengths, as the last
/// sync made them durable.
#[derive(Debug, Default)]
struct Synced {
    entries: HashSet<OsString>,
    blob_entries: HashSet<OsString>,
    blob_lengths: HashMap<OsString, u64>,
}

impl DiskSync {
    /// Opens the files of the sled database in `dir` (open already) and syncs all of them once,
    /// with `dir` itself and its parent (which may have just created it).
    ///
    /// # Errors
    /// Any failure to open, read or sync them.
    pub fn open(dir: &Path) -> io::Result<DiskSync> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                File::open(entry.path())?.sync_all()?;
            }
        }
        let disk = DiskSync {
            dir: dir.to_path_buf(),
            log: File::open(dir.join(LOG_FILE))?,
            synced: Mutex::new(Synced::default()),
        };
        disk.sync()?;
        match dir.parent() {
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
        Ok(disk)
    }

    /// The database's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes everything sled has written so far durable (call it after a flush). Costs one
    /// `fdatasync` of the log, and more only when sled wrote a blob or changed a directory.
    ///
    /// # Errors
    /// Any failure to read a directory or to sync a file: the writes it was to cover may be
    /// lost on a power cut, so the caller treats it as a failed flush.
    pub fn sync(&self) -> io::Result<()> {
        let mut synced = self
            .synced
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let blobs = self.dir.join(BLOBS_DIR);
        let blob_entries = names(&blobs)?;
        for name in &blob_entries {
            let path = blobs.join(name);
            // The length before the sync: a blob still being written is synced again next
            // time. A blob sled removed since the listing is needed no more.
            let length = match std::fs::metadata(&path) {
                Ok(metadata) => metadata.len(),
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            if synced.blob_lengths.get(name) != Some(&length) {
                match File::open(&path) {
                    Ok(file) => file.sync_data()?,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                    Err(error) => return Err(error),
                }
                synced.blob_lengths.insert(name.clone(), length);
            }
        }
        synced
            .blob_lengths
            .retain(|name, _| blob_entries.contains(name));
        if blob_entries != synced.blob_entries {
            sync_dir(&blobs)?;
            synced.blob_entries = blob_entries;
        }
        let entries = names(&self.dir)?;
        if entries != synced.entries {
            sync_dir(&self.dir)?;
            synced.entries = entries;
        }
        self.log.sync_data()
    }
}

/// The names in directory `dir`.
fn names(dir: &Path) -> io::Result<HashSet<OsString>> {
    std::fs::read_dir(dir)?
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect()
}

/// `fsync` of directory `dir`: its entries (files created, renamed, removed) become durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_sees_new_blobs_grown_blobs_and_changed_entries_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(BLOBS_DIR)).expect("blobs");
        std::fs::write(dir.path().join(LOG_FILE), b"log").expect("log");
        let disk = DiskSync::open(dir.path()).expect("open");
        let seen = |disk: &DiskSync| {
            let synced = disk.synced.lock().expect("lock");
            (
                synced.entries.len(),
                synced.blob_entries.len(),
                synced.blob_lengths.values().sum::<u64>(),
            )
        };
        assert_eq!(seen(&disk), (2, 0, 0), "db and blobs, no blob");
        let blob = dir.path().join(BLOBS_DIR).join("42");
        std::fs::write(&blob, b"half").expect("blob");
        disk.sync().expect("sync");
        assert_eq!(seen(&disk), (2, 1, 4));
        std::fs::write(&blob, b"half and the rest").expect("grown");
        disk.sync().expect("sync");
        assert_eq!(seen(&disk), (2, 1, 17), "a grown blob is synced again");
        std::fs::remove_file(&blob).expect("removed");
        std::fs::write(dir.path().join("snap.1"), b"snapshot").expect("snapshot");
        disk.sync().expect("sync");
        assert_eq!(seen(&disk), (3, 0, 0));
    }
}
