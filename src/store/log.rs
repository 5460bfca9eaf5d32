//! One entity's log: its sled tree (none in `memory` mode) and the bytes of recent messages.
//!
//! The keys of an entity's tree are laid out per lane in `store/keys.rs`. The log's jobs have
//! a file each under `store/log/`, so that the store's cost reads file by file:
//! - `write.rs`: changes staged, planned into sled operations, committed;
//! - `ops.rs`: those operations, applied in a crash-safe order or as one atomic batch;
//! - `chunks.rs`: each lane's chunks and their departures, and the chunks a write builds;
//! - `shared.rs`: a topic's shared bodies, kept once for its subscriptions;
//! - `read.rs`: a message's bytes, and the value read last;
//! - `recovery.rs`: what the tree holds, read back at start;
//! - `compaction.rs`: nearly empty chunks emptied into their messages' own keys;
//! - `subscriptions.rs`: a topic's subscription numbers and run-time rules;
//! - `values.rs`: the values stored besides chunks (own keys, accepted ids, session states);
//! - `cache.rs`: the bytes of recent messages kept in memory.

mod cache;
mod chunks;
mod compaction;
mod ops;
mod read;
mod recovery;
mod shared;
mod subscriptions;
mod values;
mod write;

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;

use crate::store::chunk::ChunkError;
use crate::store::keys::Key;
use crate::store::log::cache::BodyCache;
use crate::store::log::chunks::LaneChunks;
use crate::store::log::shared::SharedBodies;
use crate::store::record::Record;
use crate::store::{AcceptedIds, Bodies, Change, LaneId, Log, Recovered, StoreError};

/// Where one entity's messages are kept (design.md D3).
#[derive(Debug)]
pub struct EntityLog {
    db: Option<sled::Db>,
    tree: Option<sled::Tree>,
    /// The entity's (lower-cased) name, for errors.
    entity: String,
    cache: BodyCache,
    /// The chunks of each lane that stores them.
    chunks: FastMap<LaneId, LaneChunks>,
    /// The topic's shared bodies, by first sequence number.
    shared: BTreeMap<i64, SharedBodies>,
    /// Shared bodies nothing refers to any more, to remove with the next departures.
    released: Vec<i64>,
    /// The records still in the chunks read back, per lane, until [`EntityLog::recover`]
    /// hands them out.
    recovered: HashMap<LaneId, Vec<(i64, Record)>>,
    /// Whether the chunks of the queue lane (`false`) and of the subscription lanes (`true`)
    /// were read back.
    chunks_read: [bool; 2],
    /// The chunk or shared bodies read last (deliveries read a chunk's messages one after
    /// another).
    last_read: Option<(Key, sled::IVec)>,
    /// Changes staged for the next [`EntityLog::commit`], in order.
    staged: Vec<(LaneId, Change)>,
    /// The bytes of the staged puts, readable before they are written.
    staged_bodies: FastMap<(LaneId, i64), Bytes>,
    /// Some staged change moves a message (see [`EntityLog::stage`]).
    staged_moves: bool,
}

impl EntityLog {
    /// The log of an entity stored in `tree` (`None`: `memory` mode), keeping up to
    /// `cache_budget` bytes of recent messages in memory.
    pub fn new(
        db: Option<sled::Db>,
        tree: Option<sled::Tree>,
        entity: String,
        cache_budget: usize,
    ) -> Self {
        EntityLog {
            db,
            tree,
            entity,
            cache: BodyCache {
                bodies: FastMap::new(),
                bytes: 0,
                budget: cache_budget,
            },
            chunks: FastMap::new(),
            shared: BTreeMap::new(),
            released: Vec::new(),
            recovered: HashMap::new(),
            chunks_read: [false; 2],
            last_read: None,
            staged: Vec::new(),
            staged_bodies: FastMap::new(),
            staged_moves: false,
        }
    }

    /// A decoded chunk or shared bodies, or the error naming the entity and `first`.
    fn decode<T>(&self, first: i64, decoded: Result<T, ChunkError>) -> Result<T, StoreError> {
        decoded.map_err(|error| StoreError::Chunk {
            entity: self.entity.clone(),
            first,
            error,
        })
    }

    fn missing(&self, first: i64) -> StoreError {
        StoreError::MissingBody {
            entity: self.entity.clone(),
            seq: first,
        }
    }
}

/// The seam: each job's work is in its file (see above).
impl Log for EntityLog {
    fn stage(&mut self, changes: Vec<(LaneId, Change)>, moves: bool) {
        EntityLog::stage(self, changes, moves);
    }

    fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        EntityLog::commit(self)
    }

    fn recover(&mut self, lane: LaneId) -> Result<Recovered, StoreError> {
        EntityLog::recover(self, lane)
    }

    fn end_recovery(&mut self) {
        EntityLog::end_recovery(self);
    }

    fn accepted_ids(&self) -> Result<Vec<(i64, AcceptedIds)>, StoreError> {
        EntityLog::accepted_ids(self)
    }

    fn subscription_numbers<S: std::hash::BuildHasher>(
        &mut self,
        names: &[String],
        in_use: u32,
        imposed: Option<&HashMap<String, u32, S>>,
    ) -> Result<HashMap<String, u32>, StoreError> {
        EntityLog::subscription_numbers(self, names, in_use, imposed)
    }

    fn rules(&self, lane: LaneId) -> Result<Vec<Bytes>, StoreError> {
        EntityLog::rules(self, lane)
    }

    fn compact(&mut self) -> Result<(), StoreError> {
        EntityLog::compact(self)
    }

    /// Drops the entity's tree.
    fn destroy(&mut self) -> Result<(), StoreError> {
        self.cache.clear();
        self.staged.clear();
        self.staged_bodies.clear();
        self.chunks.clear();
        self.shared.clear();
        self.released.clear();
        self.recovered.clear();
        self.last_read = None;
        if let (Some(db), Some(tree)) = (&self.db, self.tree.take()) {
            db.drop_tree(tree.name())?;
        }
        Ok(())
    }
}

impl Bodies for EntityLog {
    fn body(&mut self, lane: LaneId, seq: i64) -> Result<Bytes, StoreError> {
        EntityLog::body(self, lane, seq)
    }
}

#[cfg(test)]
mod tests;
