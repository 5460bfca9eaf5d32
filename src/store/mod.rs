//! The message store (design.md D3): one `sled::Db` under `data_dir`, one tree per entity.
//!
//! A stored message is the broker [`Record`] followed by the message bytes as the client sent
//! them; `keys.rs` says how an entity's messages are laid out in its tree, and [`log`] keeps
//! them there (chunks of messages written together, so that sled's per-operation cost, not
//! fsync, is paid per batch rather than per message). An entity reaches its log only through
//! [`Log`], the contract `conformance.rs` holds any log to. In `memory` mode there is no
//! database at all: bodies live in a map and nothing touches the disk. Beside the entity trees,
//! the database keeps the declarations of entities created at run time and every entity's and
//! subscription's creation and update times.

pub mod chunk;
pub mod commit;
#[cfg(test)]
mod conformance;
mod disk;
mod keys;
pub mod log;
pub mod record;

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{BrokerConfig, Durability};
use crate::store::chunk::ChunkError;
pub use crate::store::commit::{Flusher, FlusherThread};
use crate::store::disk::DiskSync;
pub use crate::store::log::EntityLog;
use crate::store::record::{Record, RecordError};

/// Bytes of recent messages an entity keeps in memory next to its tree.
const BODY_CACHE_BYTES: usize = 8 * 1024 * 1024;
/// sled log segment size of a new database. sled writes a node bigger than a quarter of a
/// segment as a blob file of its own; 2 MiB segments keep a leaf of 16 chunks (see [`log`])
/// inline (recovery of 1M messages: 3.4 s with sled's 512 KiB default, 1.0 s with these).
const SEGMENT_SIZE: usize = 2 * 1024 * 1024;
/// Tree-name prefix of entity trees.
const ENTITY_TREE_PREFIX: &str = "entity:";
/// What separates an entity's name from its partition's number in the name of a partition's
/// tree: `$` is in no queue or topic name.
const PARTITION_SEPARATOR: &str = "$partition";
/// Tree of the declarations of entities created at run time.
const DECLARATIONS_TREE: &str = "declarations";
/// Tree of the creation and update times of entities and subscriptions, by [`times_key`].
const TIMES_TREE: &str = "entity_times";
/// Tree of the testing features' state: the time a controlled clock reached.
const TESTING_TREE: &str = "testing";
/// The key of that time, in [`TESTING_TREE`]: big-endian ms since the Unix epoch.
const CLOCK_KEY: &str = "clock";
/// What separates a topic's name from its subscription's in a [`times_key`]: `$` is in no
/// queue or topic name, so no entity's key reads as a subscription's.
const SUBSCRIPTION_SEPARATOR: &str = "/$subscriptions/";

/// When a queue, topic or subscription was created and last updated, in ms since the Unix
/// epoch (Service Bus's `CreatedAt` and `UpdatedAt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTimes {
    /// When it was first created (or first seen declared).
    pub created_ms: i64,
    /// When an update last changed its settings (its creation, until then).
    pub updated_ms: i64,
}

impl EntityTimes {
    /// Created, and so updated, at `now_ms`.
    pub fn created(now_ms: i64) -> Self {
        EntityTimes {
            created_ms: now_ms,
            updated_ms: now_ms,
        }
    }

    /// Both times, big-endian.
    fn encode(self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.created_ms.to_be_bytes());
        bytes[8..].copy_from_slice(&self.updated_ms.to_be_bytes());
        bytes
    }

    /// Read back from [`EntityTimes::encode`]; `None` for bytes of another length.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: [u8; 16] = bytes.try_into().ok()?;
        let (created, updated) = bytes.split_at(8);
        Some(EntityTimes {
            created_ms: i64::from_be_bytes(created.try_into().ok()?),
            updated_ms: i64::from_be_bytes(updated.try_into().ok()?),
        })
    }
}

/// The key of a queue's or topic's times (`subscription` `None`), or of a topic's
/// subscription's: lower-cased, as names compare ignoring case.
pub fn times_key(entity: &str, subscription: Option<&str>) -> String {
    match subscription {
        None => entity.to_lowercase(),
        Some(subscription) => {
            format!("{entity}{SUBSCRIPTION_SEPARATOR}{subscription}").to_lowercase()
        }
    }
}

/// Whether `key` is the [`times_key`] of `entity` or of one of its subscriptions.
pub fn times_of_entity(key: &str, entity: &str) -> bool {
    let entity = entity.to_lowercase();
    key == entity
        || key
            .strip_prefix(&entity)
            .is_some_and(|rest| rest.starts_with(SUBSCRIPTION_SEPARATOR))
}

/// A storage failure. Fatal for the entity that meets it (it stops acknowledging).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// sled failed (I/O, corruption).
    #[error("storage error: {0}")]
    Sled(String),
    /// A stored record does not decode.
    #[error("entity {entity}: record of message {seq}: {error}")]
    Record {
        /// The entity.
        entity: String,
        /// The message.
        seq: i64,
        /// What is wrong.
        error: RecordError,
    },
    /// A stored chunk does not decode.
    #[error("entity {entity}: chunk from message {first}: {error}")]
    Chunk {
        /// The entity.
        entity: String,
        /// Its first message.
        first: i64,
        /// What is wrong.
        error: ChunkError,
    },
    /// A message's bytes are missing although its record exists.
    #[error("entity {entity}: the bytes of message {seq} are missing")]
    MissingBody {
        /// The entity.
        entity: String,
        /// The message.
        seq: i64,
    },
    /// Messages of an entity are stored under another number of partitions than it has now
    /// (its `partitions` changed while the broker was stopped): they would be lost.
    #[error("entity {entity}: messages are stored in {stray:?}, which its `partitions` setting no longer reads (it was changed while the broker was stopped): restore the setting, or delete the entity to drop them")]
    Partitioning {
        /// The entity.
        entity: String,
        /// The logs that hold them.
        stray: Vec<String>,
    },
}

impl From<sled::Error> for StoreError {
    fn from(error: sled::Error) -> Self {
        StoreError::Sled(error.to_string())
    }
}

/// The error of a failed sync of the database in `dir`.
fn sync_failed(dir: &std::path::Path, error: &std::io::Error) -> StoreError {
    StoreError::Sled(format!("{}: cannot sync to disk: {error}", dir.display()))
}

/// The segment size to open `data_dir` with: the one it was created with (sled refuses any
/// other), else [`SEGMENT_SIZE`].
fn segment_size(data_dir: &std::path::Path) -> usize {
    std::fs::read(data_dir.join("conf"))
        .ok()
        .and_then(|conf| {
            String::from_utf8_lossy(&conf)
                .lines()
                .find_map(|line| line.strip_prefix("segment_size: ")?.trim().parse().ok())
        })
        .unwrap_or(SEGMENT_SIZE)
}

/// One lane of an entity's tree (design.md D7): a queue's own messages or its dead-letter
/// queue; a topic's subscriptions and theirs. Owning every lane of an entity in one tree (and
/// one actor) makes dead-lettering, and a topic's fan-out, one atomic batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId {
    /// 0: the queue itself; a topic's subscriptions are numbered from 1.
    pub subscription: u32,
    /// Whether this is the dead-letter queue of that lane.
    pub dead_letter: bool,
}

/// How logs name a lane: `main`, `dead-letter`, `subscription 3`, `subscription 3
/// dead-letter`, `transfer`, `transfer dead-letter`.
impl std::fmt::Display for LaneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lane = match self.subscription {
            0 => None,
            u32::MAX => Some("transfer".to_owned()),
            n => Some(format!("subscription {n}")),
        };
        match (lane, self.dead_letter) {
            (None, false) => f.write_str("main"),
            (None, true) => f.write_str("dead-letter"),
            (Some(lane), false) => f.write_str(&lane),
            (Some(lane), true) => write!(f, "{lane} dead-letter"),
        }
    }
}

impl LaneId {
    /// A queue's own messages.
    pub const MAIN: LaneId = LaneId {
        subscription: 0,
        dead_letter: false,
    };
    /// `<queue>/$deadletterqueue`.
    pub const DEAD_LETTER: LaneId = LaneId {
        subscription: 0,
        dead_letter: true,
    };

    /// A queue's or topic's transfer lane (design.md D10): messages sent via the entity in a
    /// committed transaction, on their way to their destinations. Its number is out of reach
    /// of subscriptions (numbered from 1, one at a time); its sequence numbers are its own.
    pub const TRANSFER: LaneId = LaneId {
        subscription: u32::MAX,
        dead_letter: false,
    };
    /// `<entity>/$Transfer/$DeadLetterQueue`: transfers their destination refused for good.
    pub const TRANSFER_DEAD_LETTER: LaneId = LaneId {
        subscription: u32::MAX,
        dead_letter: true,
    };

    /// Whether this is the transfer lane or its dead-letter lane.
    pub fn is_transfer(self) -> bool {
        self.subscription == u32::MAX
    }

    /// The dead-letter lane of this lane.
    pub fn dead_letter_lane(self) -> LaneId {
        LaneId {
            dead_letter: true,
            ..self
        }
    }
}

/// What an entity's rules read of its log: the bytes of a stored message (or of one
/// staged to be written). The log is the one source; the pure core reads through this, so
/// that its rules take their bodies from any log.
pub trait Bodies {
    /// The bytes of message `seq` of `lane`.
    ///
    /// # Errors
    /// A storage failure, or [`StoreError::MissingBody`] when the message has no bytes.
    fn body(&mut self, lane: LaneId, seq: i64) -> Result<Bytes, StoreError>;
}

/// Everything an entity needs of its log: its turns' changes staged and committed, a message's
/// bytes read ([`Bodies`]), its lanes read back at start, its subscriptions' numbers and rules,
/// compaction now and then, and the whole log dropped with the entity. sled's [`EntityLog`]
/// is the implementation; `store/conformance.rs` is the suite of crash, model and restart
/// tests that it, and any other, passes.
///
/// Making writes durable is not a log's: one flush covers every log of the database (the
/// [`Flusher`], started with the store's flush).
pub trait Log: Bodies {
    /// Takes changes to write at the next [`Log::commit`]; reads see them at once. `moves`
    /// says that the commit must be atomic: the changes move a message (delete it and store
    /// it again under another number), or are a committed transaction's.
    fn stage(&mut self, changes: Vec<(LaneId, Change)>, moves: bool);

    /// Whether changes wait for [`Log::commit`].
    fn has_staged(&self) -> bool;

    /// Writes the staged changes so that a crash keeps all of them or a prefix that loses no
    /// earlier write (all or none of them, staged with `moves`). Durable at the next flush.
    ///
    /// # Errors
    /// A [`StoreError`] when the write fails (or a message to rewrite cannot be read).
    fn commit(&mut self) -> Result<(), StoreError>;

    /// Writes changes atomically: [`Log::stage`] with `moves`, then [`Log::commit`].
    ///
    /// # Errors
    /// As [`Log::commit`].
    fn write(&mut self, changes: Vec<(LaneId, Change)>) -> Result<(), StoreError> {
        self.stage(changes, true);
        self.commit()
    }

    /// What the log holds of one lane, read back at start: its next sequence number, its
    /// messages' records and its sessions' states.
    ///
    /// # Errors
    /// A [`StoreError`] for unreadable data; the entity then does not start.
    fn recover(&mut self, lane: LaneId) -> Result<Recovered, StoreError>;

    /// Ends recovery: what was read of lanes nobody recovered (subscriptions no longer
    /// declared, whose messages stay stored) is let go of.
    fn end_recovery(&mut self);

    /// The message ids the entity accepted (duplicate detection), by millisecond, oldest first.
    ///
    /// # Errors
    /// A [`StoreError`] when they cannot be read.
    fn accepted_ids(&self) -> Result<Vec<(i64, AcceptedIds)>, StoreError>;

    /// The lane numbers of a topic's subscriptions, by (lower-cased) name: the number each
    /// got when it first appeared, so that a subscription's messages stay its own whatever
    /// the order of the declarations; new names are numbered after the highest stored one and
    /// after `in_use` (the highest number a running topic uses). Numbers in `imposed` (a
    /// partitioned topic's first partition's) win over stored ones, and are stored.
    ///
    /// # Errors
    /// A [`StoreError`] when the numbers cannot be read or stored.
    fn subscription_numbers<S: std::hash::BuildHasher>(
        &mut self,
        names: &[String],
        in_use: u32,
        imposed: Option<&HashMap<String, u32, S>>,
    ) -> Result<HashMap<String, u32>, StoreError>;

    /// The stored descriptions of the rules `lane`'s subscription was given at run time.
    ///
    /// # Errors
    /// A [`StoreError`] when they cannot be read.
    fn rules(&self, lane: LaneId) -> Result<Vec<Bytes>, StoreError>;

    /// Commits what is staged, and gives back the room that messages left behind. Run now and
    /// then; cheap when there is nothing to do.
    ///
    /// # Errors
    /// A [`StoreError`] when what it rewrites cannot be read or the write fails.
    fn compact(&mut self) -> Result<(), StoreError>;

    /// Drops the whole log: every message of every lane and the sequence counter (the entity
    /// is deleted). Durable at the next flush.
    ///
    /// # Errors
    /// A [`StoreError`] when it cannot be dropped.
    fn destroy(&mut self) -> Result<(), StoreError>;
}

/// The message ids a queue or topic accepted in one millisecond: each id's digest and the
/// sequence number of the message that brought it (duplicate detection).
pub type AcceptedIds = Vec<([u8; 16], i64)>;

/// One change to an entity's stored state.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new message (or one stored again).
    Put {
        /// Sequence number.
        seq: i64,
        /// Broker record.
        record: Record,
        /// The client's bytes.
        body: Bytes,
    },
    /// A message's record changed (its bytes did not).
    Update {
        /// Sequence number.
        seq: i64,
        /// The new record.
        record: Record,
    },
    /// A message is gone.
    Delete {
        /// Sequence number.
        seq: i64,
    },
    /// The next sequence number to hand out.
    NextSeq(i64),
    /// A subscription rule added at run time (its stored description), or removed (`None`).
    Rule {
        /// The rule's name.
        name: String,
        /// Its stored description; `None`: the rule is gone.
        stored: Option<Bytes>,
    },
    /// The message ids a queue or topic accepted in one millisecond (duplicate detection), all
    /// of them so far, each with its message's sequence number; written after the messages.
    Accepted {
        /// When they were accepted, in ms since the Unix epoch.
        accepted_ms: i64,
        /// Their digests and sequence numbers.
        ids: AcceptedIds,
    },
    /// The ids accepted in that millisecond left the duplicate-detection window.
    Forgotten(i64),
    /// A session's state was set, or cleared (`None`).
    SessionState {
        /// The session id.
        session: String,
        /// The state; `None`: cleared.
        state: Option<StoredState>,
    },
}

impl Change {
    /// What the change does to the bytes kept under a sequence number: `Some(Some(bytes))`
    /// stores them, `Some(None)` drops them, `None` leaves them (the change is about something
    /// else).
    pub fn bytes(&self) -> Option<(i64, Option<&Bytes>)> {
        match self {
            Change::Put { seq, body, .. } => Some((*seq, Some(body))),
            Change::Delete { seq } => Some((*seq, None)),
            _ => None,
        }
    }
}

/// A session's state as stored, with when it was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    /// The state, as the client set it.
    pub state: Bytes,
    /// When it was set, in ms since the Unix epoch.
    pub updated_ms: i64,
}

/// What recovery found for one of an entity's queues.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The next sequence number to hand out.
    pub next_seq: i64,
    /// Every stored message's record, by sequence number.
    pub records: Vec<(i64, Record)>,
    /// The session id of each message, for a lane that requires sessions (read from the
    /// messages by the entity's setup: the log does not decode messages).
    pub sessions: HashMap<i64, String>,
    /// The stored state of each session that has one.
    pub session_states: Vec<(String, StoredState)>,
}

/// The broker's database: absent in `memory` mode.
#[derive(Debug, Clone)]
pub struct Store {
    db: Option<sled::Db>,
    /// What makes `db`'s writes durable: every flush goes through it.
    disk: Option<Arc<DiskSync>>,
    durability: Durability,
}

impl Store {
    /// The database's size on disk in bytes (0 in `memory` mode, or when it cannot be read).
    pub fn size_on_disk(&self) -> u64 {
        self.db
            .as_ref()
            .and_then(|db| db.size_on_disk().ok())
            .unwrap_or(0)
    }

    /// Opens (or creates) the database under `data_dir`, its files and directory synced; in
    /// `memory` mode opens nothing.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the directory cannot be created or synced, or the database is
    /// corrupt.
    pub fn open(config: &BrokerConfig) -> Result<Store, StoreError> {
        let dir = &config.data_dir;
        let (db, disk) = match config.durability {
            Durability::Memory => (None, None),
            Durability::Sync | Durability::Interval => {
                let db = sled::Config::new()
                    .path(dir)
                    .cache_capacity(config.cache_capacity)
                    .segment_size(segment_size(dir))
                    .flush_every_ms(None)
                    .mode(sled::Mode::HighThroughput)
                    .open()
                    .map_err(|e| StoreError::Sled(format!("{}: {e}", dir.display())))?;
                let disk = DiskSync::open(dir).map_err(|e| sync_failed(dir, &e))?;
                (Some(db), Some(Arc::new(disk)))
            }
        };
        Ok(Store {
            db,
            disk,
            durability: config.durability,
        })
    }

    /// Opens the store of `config` again in a test that had it open a moment ago. sled lets go
    /// of its file lock when its background threads let go of the database, a moment after
    /// `drop` returns (sled's own tests block on the lock for this): this waits for the lock,
    /// at most 30 s.
    ///
    /// # Errors
    /// As [`Store::open`].
    #[cfg(test)]
    pub(crate) fn reopen(config: &BrokerConfig) -> Result<Store, StoreError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match Store::open(config) {
                Err(error)
                    if error.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                opened => return opened,
            }
        }
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The flusher of this database and the end of its thread, if it has one (not in
    /// `memory` mode).
    ///
    /// # Errors
    /// [`StoreError::Sled`] when its thread cannot be started.
    pub fn flusher(&self) -> Result<Option<(Flusher, FlusherThread)>, StoreError> {
        let store = self.clone();
        self.db
            .is_some()
            .then(|| Flusher::start(move || store.flush_blocking()))
            .transpose()
    }

    /// The log of one entity (created if absent).
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be opened.
    pub fn log(&self, entity: &str) -> Result<EntityLog, StoreError> {
        let name = entity.to_lowercase();
        let tree = match &self.db {
            None => None,
            Some(db) => Some(db.open_tree(format!("{ENTITY_TREE_PREFIX}{name}"))?),
        };
        let budget = if tree.is_some() {
            BODY_CACHE_BYTES
        } else {
            usize::MAX
        };
        Ok(EntityLog::new(self.db.clone(), tree, name, budget))
    }

    /// The log of partition `partition` of a partitioned entity (created if absent).
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be opened.
    pub fn partition_log(&self, entity: &str, partition: u16) -> Result<EntityLog, StoreError> {
        self.log(&format!("{entity}{PARTITION_SEPARATOR}{partition}"))
    }

    /// The logs holding messages of `entity` that it would not read with `partitions` (its
    /// unpartitioned log for a partitioned entity, partitions beyond its count): left by a
    /// config file whose `partitions` changed while the broker was stopped. Empty logs are
    /// dropped.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the trees cannot be listed or read.
    pub fn stray_logs(
        &self,
        entity: &str,
        partitions: Option<u16>,
    ) -> Result<Vec<String>, StoreError> {
        let Some(db) = &self.db else {
            return Ok(Vec::new());
        };
        let own = format!("{ENTITY_TREE_PREFIX}{}", entity.to_lowercase());
        let mut stray = Vec::new();
        for name in db.tree_names() {
            let text = String::from_utf8_lossy(&name).into_owned();
            let partition = match text.strip_prefix(&own) {
                Some("") => None,
                Some(rest) => match rest.strip_prefix(PARTITION_SEPARATOR) {
                    Some(number) => match number.parse::<u16>() {
                        Ok(number) => Some(number),
                        Err(_) => continue,
                    },
                    None => continue,
                },
                None => continue,
            };
            let read = match (partition, partitions) {
                (None, None) => true,
                (Some(partition), Some(count)) => partition < count,
                _ => false,
            };
            if read {
                continue;
            }
            if db.open_tree(&name)?.is_empty() {
                db.drop_tree(&name)?;
            } else {
                stray.push(text.trim_start_matches(ENTITY_TREE_PREFIX).to_owned());
            }
        }
        Ok(stray)
    }

    /// Drops what the store keeps of every entity whose name starts with `prefix` (ignoring
    /// case): its logs (each partition's too), its declaration, and its times and its
    /// subscriptions'. Made durable before it returns when it dropped anything; nothing in
    /// `memory` mode. Returns how many logs it dropped.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when a tree cannot be listed, dropped or written, or the flush
    /// fails.
    pub fn forget_entities_named(&self, prefix: &str) -> Result<usize, StoreError> {
        let Some(db) = &self.db else {
            return Ok(0);
        };
        let prefix = prefix.to_lowercase();
        let logs = format!("{ENTITY_TREE_PREFIX}{prefix}");
        let mut dropped = 0;
        for name in db.tree_names() {
            if name.starts_with(logs.as_bytes()) {
                db.drop_tree(&name)?;
                dropped += 1;
            }
        }
        let mut forgot = false;
        for records in [DECLARATIONS_TREE, TIMES_TREE] {
            let tree = db.open_tree(records)?;
            let mut batch = sled::Batch::default();
            for key in tree.scan_prefix(&prefix).keys() {
                batch.remove(key?);
                forgot = true;
            }
            tree.apply_batch(batch)?;
        }
        if dropped > 0 || forgot {
            self.flush_blocking()?;
        }
        Ok(dropped)
    }

    /// The declarations of entities created at run time, by lower-cased name: each the TOML
    /// text of a [`crate::config::Declaration`]. None in `memory` mode.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be read.
    pub fn declarations(&self) -> Result<Vec<(String, String)>, StoreError> {
        let Some(db) = &self.db else {
            return Ok(Vec::new());
        };
        let tree = db.open_tree(DECLARATIONS_TREE)?;
        tree.iter()
            .map(|entry| {
                let (name, declaration) = entry?;
                let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
                Ok((text(&name), text(&declaration)))
            })
            .collect()
    }

    /// Keeps (`Some`) or forgets (`None`) the declaration of the entity `name`, flushed to
    /// disk before it returns in every mode but `memory`, where it does nothing. Blocks for
    /// the flush.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the write or the flush fails.
    pub fn set_declaration(&self, name: &str, text: Option<&str>) -> Result<(), StoreError> {
        let Some(db) = &self.db else {
            return Ok(());
        };
        let tree = db.open_tree(DECLARATIONS_TREE)?;
        let key = name.to_lowercase();
        match text {
            Some(text) => tree.insert(key, text.as_bytes())?,
            None => tree.remove(key)?,
        };
        self.flush_blocking()
    }

    /// The times of every entity and subscription, by [`times_key`]; none in `memory` mode.
    /// A value that does not read is left out, loudly.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be read.
    pub fn times(&self) -> Result<HashMap<String, EntityTimes>, StoreError> {
        let Some(tree) = self.times_tree()? else {
            return Ok(HashMap::new());
        };
        let mut times = HashMap::new();
        for entry in tree.iter() {
            let (key, value) = entry?;
            let key = String::from_utf8_lossy(&key).into_owned();
            match EntityTimes::decode(&value) {
                Some(value) => {
                    times.insert(key, value);
                }
                None => tracing::error!(%key, "stored times do not read: left out"),
            }
        }
        Ok(times)
    }

    /// Keeps (`Some`) or forgets (`None`) times, by [`times_key`]. In `sync` mode they are
    /// flushed to disk before it returns (it blocks for the flush); in `interval` mode the
    /// next periodic flush takes them; in `memory` mode nothing is stored.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the write or the flush fails.
    pub fn set_times(&self, changes: &[(String, Option<EntityTimes>)]) -> Result<(), StoreError> {
        let Some(tree) = self.times_tree()?.filter(|_| !changes.is_empty()) else {
            return Ok(());
        };
        let mut batch = sled::Batch::default();
        for (key, times) in changes {
            match times {
                Some(times) => batch.insert(key.as_bytes(), &times.encode()[..]),
                None => batch.remove(key.as_bytes()),
            }
        }
        tree.apply_batch(batch)?;
        self.flush_times()
    }

    /// Forgets the times of a queue or topic and of all its subscriptions, stored as
    /// [`Store::set_times`] stores them.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the write or the flush fails.
    pub fn forget_times(&self, entity: &str) -> Result<(), StoreError> {
        let Some(tree) = self.times_tree()? else {
            return Ok(());
        };
        let mut batch = sled::Batch::default();
        for key in tree.scan_prefix(entity.to_lowercase()).keys() {
            let key = key?;
            if times_of_entity(&String::from_utf8_lossy(&key), entity) {
                batch.remove(key);
            }
        }
        tree.apply_batch(batch)?;
        self.flush_times()
    }

    fn times_tree(&self) -> Result<Option<sled::Tree>, StoreError> {
        Ok(match &self.db {
            Some(db) => Some(db.open_tree(TIMES_TREE)?),
            None => None,
        })
    }

    /// Forgets every stored declaration (what was created at run time) and every entity's
    /// times but `times`, which it stores, then makes the store durable (every mode: a reset
    /// answers once it is on disk). Entity logs are destroyed by their actors first.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when a tree cannot be written or the flush fails.
    pub fn reset_records(&self, times: &[(String, EntityTimes)]) -> Result<(), StoreError> {
        let Some(db) = &self.db else {
            return Ok(());
        };
        db.open_tree(DECLARATIONS_TREE)?.clear()?;
        let tree = db.open_tree(TIMES_TREE)?;
        tree.clear()?;
        let mut batch = sled::Batch::default();
        for (key, times) in times {
            batch.insert(key.as_bytes(), &times.encode()[..]);
        }
        tree.apply_batch(batch)?;
        self.flush_blocking()
    }

    /// The broker time a controlled test clock last reached on this store, if one ever ran.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be read.
    pub fn test_clock(&self) -> Result<Option<i64>, StoreError> {
        let Some(db) = &self.db else {
            return Ok(None);
        };
        let stored = db.open_tree(TESTING_TREE)?.get(CLOCK_KEY)?;
        Ok(stored
            .and_then(|bytes| <[u8; 8]>::try_from(&bytes[..]).ok())
            .map(i64::from_be_bytes))
    }

    /// Keeps the broker time a controlled test clock reached, on disk before it returns in
    /// every mode but `memory` (a restart starts the clock there or later). Blocks for the
    /// flush.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the write or the flush fails.
    pub fn set_test_clock(&self, now_ms: i64) -> Result<(), StoreError> {
        let Some(db) = &self.db else {
            return Ok(());
        };
        db.open_tree(TESTING_TREE)?
            .insert(CLOCK_KEY, &now_ms.to_be_bytes())?;
        self.flush_blocking()
    }

    /// Makes written times durable in `sync` mode; `interval` mode's periodic flush takes them.
    fn flush_times(&self) -> Result<(), StoreError> {
        if self.durability == Durability::Sync {
            self.flush_blocking()?;
        }
        Ok(())
    }

    /// Makes everything written so far durable: sled's flush, then the sync of the files it
    /// wrote (see `disk.rs`: sled's flush alone does not survive a power cut). Blocks; while
    /// the broker runs, the flusher thread calls it for every waiting writer at once.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the flush or the sync fails.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        if let (Some(db), Some(disk)) = (&self.db, &self.disk) {
            db.flush()?;
            disk.sync().map_err(|e| sync_failed(disk.dir(), &e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn lanes_are_named_in_words() {
        let subscription = |subscription, dead_letter| LaneId {
            subscription,
            dead_letter,
        };
        let names = [
            LaneId::MAIN,
            LaneId::DEAD_LETTER,
            subscription(3, false),
            subscription(3, true),
            LaneId::TRANSFER,
            LaneId::TRANSFER_DEAD_LETTER,
        ]
        .map(|lane| lane.to_string());
        assert_eq!(
            names,
            [
                "main",
                "dead-letter",
                "subscription 3",
                "subscription 3 dead-letter",
                "transfer",
                "transfer dead-letter"
            ]
        );
    }

    #[test]
    fn times_keys_tell_an_entity_its_subscriptions_and_other_entities_apart() {
        let subscription = times_key("Orders", Some("EU"));
        assert_eq!(subscription, "orders/$subscriptions/eu");
        assert!(times_of_entity(&subscription, "ORDERS"));
        assert!(times_of_entity("orders", "Orders"));
        assert!(
            !times_of_entity("orders/eu", "orders"),
            "a queue named with a '/'"
        );
        assert!(!times_of_entity("orders2", "orders"));
        let times = EntityTimes {
            created_ms: 1,
            updated_ms: 1_700_000_000_000,
        };
        assert_eq!(EntityTimes::decode(&times.encode()), Some(times));
        assert_eq!(EntityTimes::decode(b"short"), None);
    }

    #[test]
    fn entities_are_forgotten_by_the_start_of_their_name_logs_records_and_times() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            durability: Durability::Sync,
            ..Config::embedded_default().broker
        };
        let store = Store::open(&config).expect("open");
        for log in [
            store.log("$Temp-Queue-a"),
            store.partition_log("$temp-topic-b", 1),
            store.log("orders"),
        ] {
            drop(log.expect("log"));
        }
        for name in ["$temp-queue-a", "orders"] {
            store.set_declaration(name, Some("text")).expect("declare");
        }
        let times = Some(EntityTimes::created(1));
        let keys = [
            times_key("$temp-queue-a", None),
            times_key("$temp-topic-b", Some("s")),
            times_key("orders", None),
        ];
        let changes: Vec<_> = keys.iter().map(|key| (key.clone(), times)).collect();
        store.set_times(&changes).expect("times");

        assert_eq!(store.forget_entities_named("$TEMP-").expect("forget"), 2);
        let db = store.db.as_ref().expect("a database");
        let trees: Vec<String> = (db.tree_names().iter())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .filter(|name| name.starts_with(ENTITY_TREE_PREFIX))
            .collect();
        assert_eq!(trees, ["entity:orders"]);
        let declared: Vec<String> = (store.declarations().expect("declarations"))
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(declared, ["orders"]);
        let timed: Vec<String> = store.times().expect("times").into_keys().collect();
        assert_eq!(timed, ["orders"]);
        assert_eq!(store.forget_entities_named("$temp-").expect("again"), 0);
    }

    #[test]
    fn an_existing_database_keeps_the_segment_size_it_was_created_with() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(segment_size(dir.path()), SEGMENT_SIZE, "a new database");
        let old = sled::Config::new()
            .path(dir.path())
            .segment_size(512 * 1024)
            .open()
            .expect("open");
        drop(old);
        assert_eq!(segment_size(dir.path()), 512 * 1024);
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            ..Config::embedded_default().broker
        };
        // sled holds its lock a moment after `drop` returns (a fresh clone's CI saw it).
        if let Err(error) = Store::reopen(&config) {
            panic!("sled accepts the size it was created with: {error}");
        }
    }
}
