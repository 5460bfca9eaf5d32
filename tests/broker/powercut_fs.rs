//! A disk for power-cut tests: an in-memory FUSE file system that can lose, at once, everything
//! not yet made durable, as a power cut would.
//!
//! The model is strict. A file's data and size are durable once the file is fsynced (`fsync` or
//! `fdatasync`); a directory's entries (create, mkdir, unlink, rmdir, rename) once the directory
//! is fsynced, and not before: a data directory made on the mount survives a cut only once the
//! mount point is fsynced too. `sync_file_range` is no sync: every file is opened with direct
//! I/O, so the kernel keeps no page cache of ours and has nothing to write back, and every write
//! reaches the model as it happens. Locks are the kernel's: fuser's `init` asks for neither
//! `FUSE_FLOCK_LOCKS` nor `FUSE_POSIX_LOCKS`, so `flock` never reaches us. Of the metadata, only
//! the size and the permissions are kept.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackgroundSession, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use tempfile::TempDir;

/// How long the kernel may trust an entry or attributes: not at all, so that after a cut it
/// asks again and sees what the disk kept.
const TTL: Duration = Duration::ZERO;
/// A torn write keeps whole sectors.
const SECTOR: usize = 512;
const ROOT: u64 = INodeNo::ROOT.0;

/// What the disk keeps of what nobody synced.
#[derive(Debug, Clone, Copy)]
pub enum Cut {
    /// Nothing.
    DropUnsynced,
    /// Each file keeps a prefix, chosen by `seed`, of its unsynced changes in order; the last
    /// write kept may itself be torn after a whole number of 512-byte sectors. Directories keep
    /// nothing unsynced.
    TornTail { seed: u64 },
}

/// What a cut did to the unsynced writes, for the test to print.
#[derive(Debug, Default, Clone, Copy)]
pub struct CutReport {
    /// Unsynced writes the disk never got.
    pub writes_dropped: usize,
    /// Their bytes, and the lost tail of a torn write.
    pub bytes_dropped: u64,
    /// Unsynced writes the disk got anyway, a torn one included (`Cut::TornTail` only).
    pub writes_kept: usize,
}

/// What reached the disk since the mount, so that a test can tell that the broker did sync.
#[derive(Debug, Default, Clone, Copy)]
pub struct SyncCounts {
    /// `fsync` and `fdatasync` of files.
    pub file_syncs: u64,
    /// `fsync` of directories.
    pub dir_syncs: u64,
    /// Write requests: with direct I/O, about one per `write` or `pwrite`.
    pub writes: u64,
    /// Their bytes.
    pub bytes_written: u64,
}

/// A change to a file since its last sync, kept so that a torn cut can replay a prefix.
enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl Op {
    fn apply(&self, data: &mut Vec<u8>) {
        match self {
            Op::Write { offset, bytes } => {
                let start = *offset as usize;
                let end = start + bytes.len();
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[start..end].copy_from_slice(bytes);
            }
            Op::SetLen(len) => data.resize(*len as usize, 0),
        }
    }
}

/// A file's data: what survives a cut, the changes since, and both together (what reads see).
#[derive(Default)]
struct FileData {
    durable: Vec<u8>,
    pending: Vec<Op>,
    current: Vec<u8>,
}

impl FileData {
    fn change(&mut self, op: Op) {
        op.apply(&mut self.current);
        self.pending.push(op);
    }

    fn sync(&mut self) {
        self.pending
            .drain(..)
            .for_each(|op| op.apply(&mut self.durable));
    }

    /// Without `torn`, forgets every pending change; with it, keeps a random prefix of them.
    fn cut(&mut self, mut torn: Option<&mut XorShift>, report: &mut CutReport) {
        let pending = std::mem::take(&mut self.pending);
        let kept = torn.as_mut().map_or(0, |rng| rng.below(pending.len() + 1));
        for (index, mut op) in pending.into_iter().enumerate() {
            if let Op::Write { bytes, .. } = &mut op {
                if index >= kept {
                    report.writes_dropped += 1;
                    report.bytes_dropped += bytes.len() as u64;
                    continue;
                }
                if let (Some(rng), true) = (torn.as_mut(), index + 1 == kept) {
                    let sectors = 1 + rng.below(bytes.len().div_ceil(SECTOR));
                    let torn_len = (sectors * SECTOR).min(bytes.len());
                    report.bytes_dropped += (bytes.len() - torn_len) as u64;
                    bytes.truncate(torn_len);
                }
                report.writes_kept += 1;
            } else if index >= kept {
                continue;
            }
            op.apply(&mut self.durable);
        }
        self.current = self.durable.clone();
    }
}

/// xorshift64*, seeded through splitmix64, so that the seed a test prints tears the same way
/// again.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        XorShift((z ^ (z >> 31)) | 1)
    }

    /// A number in `0..n`, `n` > 0.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// A directory's entries, name to inode: what survives a cut, and what lookups see now.
#[derive(Default)]
struct Dir {
    durable: BTreeMap<OsString, u64>,
    current: BTreeMap<OsString, u64>,
}

enum Node {
    File(FileData),
    Dir(Dir),
}

struct Inode {
    node: Node,
    perm: u16,
}

/// The file system, without FUSE. Inodes are in order, so that a seed always tears the same
/// way, and their numbers are never reused, so that the kernel cannot take a new file for one
/// the disk forgot. An inode is forgotten when a cut leaves no way to it, not before (FUSE's
/// `forget` is left a no-op): a file unlinked but not synced comes back.
struct Model {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    counts: SyncCounts,
    /// The owner of every inode: the mount point's.
    owner: (u32, u32),
    /// The times of every inode.
    mounted: SystemTime,
}

impl Model {
    fn new(owner: (u32, u32)) -> Model {
        let mut model = Model {
            inodes: BTreeMap::new(),
            next_ino: ROOT,
            counts: SyncCounts::default(),
            owner,
            mounted: SystemTime::now(),
        };
        model.add(Node::Dir(Dir::default()), 0o755);
        model
    }

    fn add(&mut self, node: Node, mode: u32) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let perm = (mode & 0o7777) as u16;
        self.inodes.insert(ino, Inode { node, perm });
        ino
    }

    fn node(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        Ok(&mut self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?.node)
    }

    fn file(&mut self, ino: u64) -> Result<&mut FileData, Errno> {
        match self.node(ino)? {
            Node::File(file) => Ok(file),
            Node::Dir(_) => Err(Errno::EISDIR),
        }
    }

    fn dir(&mut self, ino: u64) -> Result<&mut Dir, Errno> {
        match self.node(ino)? {
            Node::Dir(dir) => Ok(dir),
            Node::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn child(&mut self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        let entry = self.dir(parent)?.current.get(name);
        entry.copied().ok_or(Errno::ENOENT)
    }

    fn kind(&self, ino: u64) -> FileType {
        match self.inodes.get(&ino).map(|inode| &inode.node) {
            Some(Node::Dir(_)) => FileType::Directory,
            _ => FileType::RegularFile,
        }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let inode = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        let size = match &inode.node {
            Node::File(file) => file.current.len() as u64,
            Node::Dir(dir) => dir.current.len() as u64,
        };
        let time = self.mounted;
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind: self.kind(ino),
            perm: inode.perm,
            nlink: 1,
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn lookup(&mut self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = self.child(parent, name)?;
        self.attr(ino)
    }

    fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        node: Node,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        if self.dir(parent)?.current.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.add(node, mode);
        self.dir(parent)?.current.insert(name.to_owned(), ino);
        self.attr(ino)
    }

    /// The inode `name` in `parent`, if it may go as a directory (`dir`) or as a file would.
    fn removable(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<u64, Errno> {
        let ino = self.child(parent, name)?;
        match (self.node(ino)?, dir) {
            (Node::File(_), true) => Err(Errno::ENOTDIR),
            (Node::Dir(_), false) => Err(Errno::EISDIR),
            (Node::Dir(d), true) if !d.current.is_empty() => Err(Errno::ENOTEMPTY),
            _ => Ok(ino),
        }
    }

    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        self.removable(parent, name, dir)?;
        self.dir(parent)?.current.remove(name);
        Ok(())
    }

    fn rename(
        &mut self,
        from: (u64, &OsStr),
        to: (u64, &OsStr),
        no_replace: bool,
    ) -> Result<(), Errno> {
        let ino = self.child(from.0, from.1)?;
        if self.dir(to.0)?.current.contains_key(to.1) {
            if no_replace {
                return Err(Errno::EEXIST);
            }
            let dir = self.kind(ino) == FileType::Directory;
            self.removable(to.0, to.1, dir)?;
        }
        self.dir(from.0)?.current.remove(from.1);
        self.dir(to.0)?.current.insert(to.1.to_owned(), ino);
        Ok(())
    }

    fn set_attr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        size: Option<u64>,
    ) -> Result<FileAttr, Errno> {
        if let Some(len) = size {
            self.file(ino)?.change(Op::SetLen(len));
        }
        let inode = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        inode.perm = mode.map_or(inode.perm, |mode| (mode & 0o7777) as u16);
        self.attr(ino)
    }

    fn read(&mut self, ino: u64, offset: u64, size: u32) -> Result<&[u8], Errno> {
        let data = &self.file(ino)?.current;
        let start = (offset as usize).min(data.len());
        let end = start.saturating_add(size as usize).min(data.len());
        Ok(&data[start..end])
    }

    fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<u32, Errno> {
        let file = self.file(ino)?;
        if !bytes.is_empty() {
            file.change(Op::Write {
                offset,
                bytes: bytes.to_vec(),
            });
        }
        self.counts.writes += 1;
        self.counts.bytes_written += bytes.len() as u64;
        Ok(bytes.len() as u32)
    }

    fn sync_file(&mut self, ino: u64) -> Result<(), Errno> {
        self.file(ino)?.sync();
        self.counts.file_syncs += 1;
        Ok(())
    }

    fn sync_dir(&mut self, ino: u64) -> Result<(), Errno> {
        let dir = self.dir(ino)?;
        dir.durable = dir.current.clone();
        self.counts.dir_syncs += 1;
        Ok(())
    }

    /// `.`, `..` and the entries of directory `ino`. `..` is given as `ino`: the kernel knows
    /// the parent better.
    fn list(&mut self, ino: u64) -> Result<Vec<(u64, FileType, OsString)>, Errno> {
        let dots = [".", ".."].map(|name| (ino, FileType::Directory, OsString::from(name)));
        let children = self.dir(ino)?.current.clone();
        let entries = children
            .into_iter()
            .map(|(name, child)| (child, self.kind(child), name));
        Ok(dots.into_iter().chain(entries).collect())
    }

    fn cut(&mut self, cut: Cut) -> CutReport {
        let mut report = CutReport::default();
        let mut torn = match cut {
            Cut::DropUnsynced => None,
            Cut::TornTail { seed } => Some(XorShift::new(seed)),
        };
        for inode in self.inodes.values_mut() {
            match &mut inode.node {
                Node::File(file) => file.cut(torn.as_mut(), &mut report),
                Node::Dir(dir) => dir.current = dir.durable.clone(),
            }
        }
        // What no directory leads to any more is gone for good.
        let mut live = BTreeSet::from([ROOT]);
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            if let Ok(dir) = self.dir(ino) {
                todo.extend(dir.current.values().filter(|&&child| live.insert(child)));
            }
        }
        self.inodes.retain(|ino, _| live.contains(ino));
        report
    }
}

/// The FUSE face of the model: each request locks it, answers, and lets go.
struct Fuse(Arc<Mutex<Model>>);

/// The model, even after a panic while it was locked: a failed test must still unmount.
fn lock(model: &Mutex<Model>) -> MutexGuard<'_, Model> {
    model.lock().unwrap_or_else(PoisonError::into_inner)
}

fn entry(reply: ReplyEntry, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(errno) => reply.error(errno),
    }
}

fn attr(reply: ReplyAttr, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(errno) => reply.error(errno),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(errno) => reply.error(errno),
    }
}

/// `init`, `opendir`, `release` and `releasedir` are fuser's: they ask for no writeback cache
/// and no locks, and answer with success; `forget` is fuser's no-op.
impl Filesystem for Fuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, lock(&self.0).lookup(parent.0, name));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(reply, lock(&self.0).attr(ino.0));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        attr(reply, lock(&self.0).set_attr(ino.0, mode, size));
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let file = Node::File(FileData::default());
        entry(reply, lock(&self.0).create(parent.0, name, file, mode));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let dir = Node::Dir(Dir::default());
        entry(reply, lock(&self.0).create(parent.0, name, dir, mode));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, lock(&self.0).remove(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, lock(&self.0).remove(parent.0, name, true));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let no_replace = flags == RenameFlags::RENAME_NOREPLACE;
        let result = match flags.is_empty() || no_replace {
            true => lock(&self.0).rename((parent.0, name), (newparent.0, newname), no_replace),
            false => Err(Errno::EINVAL),
        };
        empty(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match lock(&self.0).attr(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(errno) => reply.error(errno),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let file = Node::File(FileData::default());
        match lock(&self.0).create(parent.0, name, file, mode) {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match lock(&self.0).read(ino.0, offset, size) {
            Ok(data) => reply.data(data),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match lock(&self.0).write(ino.0, offset, data) {
            Ok(written) => reply.written(written),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    /// `fsync` and `fdatasync` alike.
    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, lock(&self.0).sync_file(ino.0));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match lock(&self.0).list(ino.0) {
            Ok(entries) => entries,
            Err(errno) => return reply.error(errno),
        };
        for (index, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, lock(&self.0).sync_dir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 30, 1 << 30, 1 << 30, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}

/// The power-cut file system, mounted on a temporary directory; unmounted on drop.
pub struct PowerCutFs {
    session: Option<BackgroundSession>,
    model: Arc<Mutex<Model>>,
    mount_point: TempDir,
}

impl PowerCutFs {
    /// Mounts an empty file system on a new temporary directory (tempfile is a dev-dependency).
    /// Err(reason) when FUSE cannot be used here (no /dev/fuse, the mount is refused): the
    /// caller reports a visible skip.
    pub fn mount() -> Result<PowerCutFs, String> {
        let mount_point = tempfile::Builder::new().prefix("powercut-").tempdir();
        let mount_point = mount_point.map_err(|e| format!("no mount point: {e}"))?;
        let path = mount_point.path();
        let owner = path
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let model = Arc::new(Mutex::new(Model::new((owner.uid(), owner.gid()))));
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("powercut".into())];
        let session = fuser::spawn_mount(Fuse(model.clone()), path, &config)
            .map_err(|e| format!("cannot mount FUSE on {}: {e}", path.display()))?;
        let session = Some(session);
        Ok(PowerCutFs {
            session,
            model,
            mount_point,
        })
    }

    /// The mount point, where the broker's data directory goes.
    pub fn path(&self) -> &Path {
        self.mount_point.path()
    }

    /// Reverts every file and directory to what was synced (see [`Cut`]). Meant for when no
    /// process has a file open here; an open file the cut took away then answers `ENOENT`.
    pub fn cut_power(&self, cut: Cut) -> CutReport {
        lock(&self.model).cut(cut)
    }

    /// What reached the disk so far.
    pub fn sync_counts(&self) -> SyncCounts {
        lock(&self.model).counts
    }
}

impl Drop for PowerCutFs {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if session.umount_and_join().is_err() {
            // Busy: a process still has a file open here. Detached, the mount point is free,
            // and the kernel ends the mount when the last file closes.
            let path = CString::new(self.path().as_os_str().as_bytes()).expect("a path has no NUL");
            // SAFETY: `path` is a C string that outlives the call.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Prints that `test` was skipped, and why, straight to the process's stderr (not through the
/// test harness's capture, which hides eprintln! of passing tests), so a skipped power-cut test
/// is visible in `cargo test` output.
pub fn say_skipped(test: &str, reason: &str) {
    let message = format!("SKIPPED {test}: no power-cut file system: {reason}\n");
    let _ = std::io::stderr().write_all(message.as_bytes());
}

fn mounted(test: &str) -> Option<PowerCutFs> {
    PowerCutFs::mount()
        .map_err(|reason| say_skipped(test, &reason))
        .ok()
}

fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

/// A new file holding `data`, synced, in its synced directory.
fn durable_file(path: &Path, data: &[u8]) -> File {
    let mut options = OpenOptions::new();
    let file = options
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap();
    file.write_all_at(data, 0).unwrap();
    file.sync_all().unwrap();
    sync_dir(path.parent().unwrap());
    file
}

#[test]
fn synced_data_survives_a_cut_and_unsynced_data_does_not() {
    let Some(fs) = mounted("synced_data_survives_a_cut_and_unsynced_data_does_not") else {
        return;
    };
    let [by_all, by_data] = ["all", "data"].map(|name| fs.path().join(name));
    let file = File::create(&by_all).unwrap();
    file.write_all_at(b"synced by sync_all", 0).unwrap();
    file.sync_all().unwrap();
    file.write_all_at(b"not synced", 18).unwrap();
    let other = File::create(&by_data).unwrap();
    other.write_all_at(b"synced by sync_data", 0).unwrap();
    other.sync_data().unwrap();
    sync_dir(fs.path());
    drop((file, other));
    let counts = fs.sync_counts();
    let requests = (
        counts.file_syncs,
        counts.dir_syncs,
        counts.writes,
        counts.bytes_written,
    );
    assert_eq!(requests, (2, 1, 3, 18 + 10 + 19));

    let report = fs.cut_power(Cut::DropUnsynced);
    let dropped = (
        report.writes_dropped,
        report.bytes_dropped,
        report.writes_kept,
    );
    assert_eq!(dropped, (1, 10, 0));
    assert_eq!(fs::read(&by_all).unwrap(), b"synced by sync_all");
    assert_eq!(fs::read(&by_data).unwrap(), b"synced by sync_data");
}

#[test]
fn sync_file_range_is_not_a_sync() {
    let Some(fs) = mounted("sync_file_range_is_not_a_sync") else {
        return;
    };
    let path = fs.path().join("f");
    let file = durable_file(&path, b"");
    file.write_all_at(&[7; 8192], 0).unwrap();
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let before = fs.sync_counts();
    // SAFETY: a plain system call on the descriptor `file` holds.
    let synced = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 8192, flags) };
    assert_eq!(synced, 0);
    let after = fs.sync_counts();
    let requests = |counts: SyncCounts| (counts.file_syncs, counts.writes);
    assert_eq!(
        requests(before),
        requests(after),
        "sync_file_range reached us"
    );
    drop(file);
    fs.cut_power(Cut::DropUnsynced);
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn a_new_file_needs_its_directory_synced() {
    let Some(fs) = mounted("a_new_file_needs_its_directory_synced") else {
        return;
    };
    let dir = fs.path().join("d");
    fs::create_dir(&dir).unwrap();
    sync_dir(fs.path());
    let path = dir.join("f");
    let file = File::create(&path).unwrap();
    file.write_all_at(b"data", 0).unwrap();
    file.sync_all().unwrap();
    drop(file);
    fs.cut_power(Cut::DropUnsynced);
    assert!(dir.is_dir() && !path.exists());

    drop(durable_file(&path, b"data"));
    fs.cut_power(Cut::DropUnsynced);
    assert_eq!(fs::read(&path).unwrap(), b"data");
}

#[test]
fn an_unsynced_growth_is_reverted() {
    let Some(fs) = mounted("an_unsynced_growth_is_reverted") else {
        return;
    };
    let path = fs.path().join("f");
    let file = durable_file(&path, b"abc");
    file.set_len(4096).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 4096);
    drop(file);
    fs.cut_power(Cut::DropUnsynced);
    assert_eq!(fs::read(&path).unwrap(), b"abc");
}

#[test]
fn a_rename_survives_once_its_directory_is_synced() {
    let Some(fs) = mounted("a_rename_survives_once_its_directory_is_synced") else {
        return;
    };
    let [a, b, c] = ["a", "b", "c"].map(|name| fs.path().join(name));
    drop(durable_file(&a, b"data"));
    fs::rename(&a, &b).unwrap();
    sync_dir(fs.path());
    fs::rename(&b, &c).unwrap();
    fs.cut_power(Cut::DropUnsynced);
    assert!(!a.exists() && !c.exists());
    assert_eq!(fs::read(&b).unwrap(), b"data");
}

#[test]
fn a_torn_tail_keeps_a_prefix_of_the_writes() {
    let Some(fs) = mounted("a_torn_tail_keeps_a_prefix_of_the_writes") else {
        return;
    };
    let writes: Vec<Vec<u8>> = (1..=4).map(|fill| vec![fill; 3 * SECTOR]).collect();
    let (mut none_kept, mut all_kept) = (false, false);
    for seed in 0..64 {
        let path = fs.path().join(format!("f{seed}"));
        let file = durable_file(&path, b"durable");
        for (index, write) in writes.iter().enumerate() {
            file.write_all_at(write, (7 + index * write.len()) as u64)
                .unwrap();
        }
        drop(file);
        let report = fs.cut_power(Cut::TornTail { seed });
        assert_eq!(report.writes_kept + report.writes_dropped, writes.len());
        let data = fs::read(&path).unwrap();
        let (durable, mut kept) = data.split_at(7);
        assert_eq!(durable, b"durable");
        for write in &writes {
            let len = kept.len().min(write.len());
            assert_eq!(kept[..len], write[..len], "seed {seed}");
            assert!(
                len == write.len() || len % SECTOR == 0,
                "seed {seed}: torn in a sector"
            );
            kept = &kept[len..];
        }
        assert!(kept.is_empty(), "seed {seed}: more than was written");
        none_kept |= data.len() == 7;
        all_kept |= report.writes_kept == writes.len() && report.bytes_dropped == 0;
    }
    assert!(
        none_kept && all_kept,
        "none kept: {none_kept}, all kept: {all_kept}"
    );
}

#[test]
fn reads_after_a_cut_come_from_the_disk_not_from_a_kernel_cache() {
    let Some(fs) = mounted("reads_after_a_cut_come_from_the_disk_not_from_a_kernel_cache") else {
        return;
    };
    let path = fs.path().join("f");
    let file = durable_file(&path, b"hello world");
    file.write_all_at(b"HELLO", 0).unwrap();
    let mut read = [0; 11];
    file.read_exact_at(&mut read, 0).unwrap();
    assert_eq!(&read, b"HELLO world");
    fs.cut_power(Cut::DropUnsynced);
    file.read_exact_at(&mut read, 0).unwrap();
    assert_eq!(&read, b"hello world");
    assert_eq!(fs::read(&path).unwrap(), b"hello world");
}

#[test]
fn flock_is_left_to_the_kernel() {
    let Some(fs) = mounted("flock_is_left_to_the_kernel") else {
        return;
    };
    let path = fs.path().join("lock");
    let (first, second) = (durable_file(&path, b""), File::open(&path).unwrap());
    // SAFETY: a plain system call on the descriptor `file` holds.
    let lock =
        |file: &File| unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(lock(&first), 0);
    assert_eq!(lock(&second), -1, "a second exclusive flock was granted");
}

#[test]
fn the_model_reverts_unsynced_directory_changes() {
    let mut model = Model::new((0, 0));
    let name = OsStr::new;
    let mut add = |parent, entry, node| {
        model
            .create(parent, name(entry), node, 0o755)
            .unwrap()
            .ino
            .0
    };
    let d = add(ROOT, "d", Node::Dir(Dir::default()));
    let moved = add(d, "moved", Node::File(FileData::default()));
    let old = add(ROOT, "old", Node::File(FileData::default()));
    let new = add(d, "new", Node::File(FileData::default()));
    model.sync_dir(ROOT).unwrap();
    let (from, to) = ((d, name("moved")), (ROOT, name("old")));
    assert_eq!(model.rename(from, to, true), Err(Errno::EEXIST));
    model.rename(from, to, false).unwrap();
    assert_eq!(model.lookup(ROOT, name("old")).unwrap().ino.0, moved);
    assert_eq!(model.remove(ROOT, name("d"), true), Err(Errno::ENOTEMPTY));
    assert_eq!(model.remove(ROOT, name("d"), false), Err(Errno::EISDIR));
    model.sync_dir(d).unwrap();

    model.cut(Cut::DropUnsynced);
    assert_eq!(model.lookup(ROOT, name("old")).unwrap().ino.0, old);
    assert_eq!(model.lookup(d, name("new")).unwrap().ino.0, new);
    // Synced out of d, never into the root: gone.
    assert!(!model.inodes.contains_key(&moved));
}

#[test]
fn the_model_tears_only_the_last_write_kept_and_at_a_sector() {
    let mut seen = BTreeSet::new();
    for seed in 0..64 {
        let mut file = FileData::default();
        file.change(Op::Write {
            offset: 0,
            bytes: vec![1; 1000],
        });
        file.change(Op::SetLen(100));
        file.change(Op::Write {
            offset: 100,
            bytes: vec![2; 1500],
        });
        let mut report = CutReport::default();
        file.cut(Some(&mut XorShift::new(seed)), &mut report);
        assert_eq!(file.current, file.durable);
        assert_eq!(report.writes_kept + report.writes_dropped, 2);
        let ones = file.durable.iter().filter(|&&byte| byte == 1).count();
        let twos = file.durable.len() - ones;
        assert!([0, 512, 1000, 100].contains(&ones), "seed {seed}: {ones}");
        assert!([0, 512, 1024, 1500].contains(&twos), "seed {seed}: {twos}");
        // The file was cut to 100 bytes after all 1000 of the first write.
        let first_kept = if ones == 100 { 1000 } else { ones };
        assert_eq!(report.bytes_dropped as usize, 2500 - first_kept - twos);
        seen.insert((ones, twos));
    }
    assert_eq!(seen.len(), 7, "not every cut over 64 seeds: {seen:?}");
}
