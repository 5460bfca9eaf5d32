//! The message store (design.md D3): one `sled::Db` under `data_dir`, one tree per entity.
//!
//! In an entity's tree, key `m` + big-endian sequence number holds the broker [`Record`]
//! followed by the message bytes as the client sent them, and key `h` the next sequence number
//! (the high-water mark). Both are written in one atomic batch, so a message and the counter
//! that numbered it are never apart. One key per message keeps a send to one insert and a
//! completion to one remove: sled's per-operation cost, not fsync, bounds the throughput. In
//! `memory` mode there is no database at all: bodies live in a map and nothing touches the
//! disk.

pub mod commit;
pub mod record;

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;

use crate::config::{BrokerConfig, Durability};
pub use crate::store::commit::Flusher;
use crate::store::record::{Record, RecordError, RECORD_LEN};

const NEXT_SEQ_KEY: &[u8] = b"h";
/// Bytes of recent messages an entity keeps in memory next to its tree.
const BODY_CACHE_BYTES: usize = 8 * 1024 * 1024;
/// Tree-name prefix of entity trees.
const ENTITY_TREE_PREFIX: &str = "entity:";

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
    /// A message's bytes are missing although its record exists.
    #[error("entity {entity}: the bytes of message {seq} are missing")]
    MissingBody {
        /// The entity.
        entity: String,
        /// The message.
        seq: i64,
    },
}

impl From<sled::Error> for StoreError {
    fn from(error: sled::Error) -> Self {
        StoreError::Sled(error.to_string())
    }
}

/// The two queues an entity's tree holds: the entity's own messages and its dead-letter queue.
/// Owning both in one tree (and one actor) makes dead-lettering one atomic batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubQueue {
    /// The queue itself.
    Main,
    /// `<queue>/$deadletterqueue`.
    DeadLetter,
}

impl SubQueue {
    fn prefix(self) -> u8 {
        match self {
            SubQueue::Main => b'm',
            SubQueue::DeadLetter => b'd',
        }
    }
}

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
}

/// What recovery found for one of an entity's queues.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The next sequence number to hand out.
    pub next_seq: i64,
    /// Every stored message's record, by sequence number.
    pub records: Vec<(i64, Record)>,
}

/// The broker's database: absent in `memory` mode.
#[derive(Debug, Clone)]
pub struct Store {
    db: Option<sled::Db>,
    durability: Durability,
}

impl Store {
    /// Opens (or creates) the database under `data_dir`; in `memory` mode opens nothing.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the directory cannot be created or the database is corrupt.
    pub fn open(config: &BrokerConfig) -> Result<Store, StoreError> {
        let db = match config.durability {
            Durability::Memory => None,
            Durability::Sync | Durability::Interval => Some(
                sled::Config::new()
                    .path(&config.data_dir)
                    .cache_capacity(config.cache_capacity)
                    .flush_every_ms(None)
                    .mode(sled::Mode::HighThroughput)
                    .open()
                    .map_err(|e| StoreError::Sled(format!("{}: {e}", config.data_dir.display())))?,
            ),
        };
        Ok(Store {
            db,
            durability: config.durability,
        })
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The flusher of this database, if it has one.
    pub fn flusher(&self, tracker: &tokio_util::task::TaskTracker) -> Option<Flusher> {
        self.db.clone().map(|db| Flusher::start(db, tracker))
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
        Ok(EntityLog {
            db: self.db.clone(),
            cache_budget: if tree.is_some() {
                BODY_CACHE_BYTES
            } else {
                usize::MAX
            },
            tree,
            entity: name,
            cache: HashMap::new(),
            cached_bytes: 0,
        })
    }

    /// Flushes everything written so far (used once at shutdown).
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the flush fails.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        if let Some(db) = &self.db {
            db.flush()?;
        }
        Ok(())
    }
}

/// Where one entity's messages are kept: its sled tree (none in `memory` mode) and the bytes
/// of recent messages, so that a queue that keeps up never reads its own writes back.
#[derive(Debug)]
pub struct EntityLog {
    db: Option<sled::Db>,
    tree: Option<sled::Tree>,
    /// The entity's (lower-cased) name, for errors.
    entity: String,
    /// Bytes of messages by queue and sequence number: every message in `memory` mode, the
    /// most recent ones within `cache_budget` otherwise.
    cache: HashMap<(SubQueue, i64), Bytes>,
    cached_bytes: usize,
    cache_budget: usize,
}

fn key(prefix: u8, seq: i64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = prefix;
    key[1..].copy_from_slice(&seq.to_be_bytes());
    key
}

impl EntityLog {
    /// Reads every record of one queue back (sled modes) and logs how long it took.
    ///
    /// # Errors
    /// A [`StoreError`] for unreadable data; the entity then does not start.
    pub fn recover(&self, sub: SubQueue) -> Result<Recovered, StoreError> {
        let Some(tree) = &self.tree else {
            return Ok(Recovered {
                next_seq: 1,
                records: Vec::new(),
            });
        };
        let entity = &self.entity;
        let started = Instant::now();
        let next_seq = match tree.get(NEXT_SEQ_KEY)? {
            Some(raw) if raw.len() == 8 => {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&raw);
                i64::from_be_bytes(bytes)
            }
            _ => 1,
        };
        let mut records = Vec::new();
        for item in tree.scan_prefix([sub.prefix()]) {
            let (key, value) = item?;
            let mut seq_bytes = [0u8; 8];
            seq_bytes.copy_from_slice(&key[1..9]);
            let seq = i64::from_be_bytes(seq_bytes);
            let (record, _) = Record::decode(&value).map_err(|error| StoreError::Record {
                entity: entity.clone(),
                seq,
                error,
            })?;
            records.push((seq, record));
        }
        tracing::info!(
            entity = %entity,
            queue = ?sub,
            messages = records.len(),
            next_seq,
            elapsed = ?started.elapsed(),
            "recovered"
        );
        Ok(Recovered { next_seq, records })
    }

    /// Applies changes atomically (one sled batch).
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the write fails.
    pub fn write(&mut self, changes: Vec<(SubQueue, Change)>) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (sub, change) in changes {
            let prefix = sub.prefix();
            match change {
                Change::Put { seq, record, body } => {
                    if self.tree.is_some() {
                        let mut value = Vec::with_capacity(RECORD_LEN + body.len());
                        value.extend_from_slice(&record.encode());
                        value.extend_from_slice(&body);
                        batch.insert(&key(prefix, seq), value);
                    }
                    if let Some(old) = self.cache.remove(&(sub, seq)) {
                        self.cached_bytes -= old.len();
                    }
                    if self.cached_bytes + body.len() <= self.cache_budget {
                        self.cached_bytes += body.len();
                        self.cache.insert((sub, seq), body);
                    }
                }
                Change::Update { seq, record } => {
                    // The actor is the tree's only writer: read, patch, write back.
                    let old = match &self.tree {
                        Some(tree) => tree.get(key(prefix, seq))?,
                        None => None,
                    };
                    if let Some(old) = old {
                        let body_at = self.body_offset(seq, &old)?;
                        let mut value = Vec::with_capacity(RECORD_LEN + old.len() - body_at);
                        value.extend_from_slice(&record.encode());
                        value.extend_from_slice(&old[body_at..]);
                        batch.insert(&key(prefix, seq), value);
                    }
                }
                Change::Delete { seq } => {
                    batch.remove(&key(prefix, seq));
                    if let Some(body) = self.cache.remove(&(sub, seq)) {
                        self.cached_bytes -= body.len();
                    }
                }
                Change::NextSeq(next) => batch.insert(NEXT_SEQ_KEY, &next.to_be_bytes()),
            }
        }
        match &self.tree {
            Some(tree) => Ok(tree.apply_batch(batch)?),
            None => Ok(()),
        }
    }

    /// Deletes the entity's tree, every message of both its queues and its sequence counter
    /// with it (auto-delete on idle). The deletion is durable at the next flush.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the tree cannot be dropped.
    pub fn destroy(&mut self) -> Result<(), StoreError> {
        self.cache.clear();
        self.cached_bytes = 0;
        if let (Some(db), Some(tree)) = (&self.db, self.tree.take()) {
            db.drop_tree(tree.name())?;
        }
        Ok(())
    }

    /// The bytes of a stored message.
    ///
    /// # Errors
    /// [`StoreError::MissingBody`] when the message has no bytes, or a sled error.
    pub fn body(&self, sub: SubQueue, seq: i64) -> Result<Bytes, StoreError> {
        if let Some(body) = self.cache.get(&(sub, seq)) {
            return Ok(body.clone());
        }
        let prefix = sub.prefix();
        let stored = match &self.tree {
            Some(tree) => tree.get(key(prefix, seq))?,
            None => None,
        };
        match stored {
            Some(value) => Ok(Bytes::copy_from_slice(
                &value[self.body_offset(seq, &value)?..],
            )),
            None => Err(StoreError::MissingBody {
                entity: self.entity.clone(),
                seq,
            }),
        }
    }

    /// Where the message bytes start in a stored value: after its record, whatever its
    /// version.
    fn body_offset(&self, seq: i64, value: &[u8]) -> Result<usize, StoreError> {
        Record::decode(value)
            .map(|(_, len)| len)
            .map_err(|error| StoreError::Record {
                entity: self.entity.clone(),
                seq,
                error,
            })
    }
}
