//! Chunks as the log tracks them (the format is in [`crate::store::chunk`]): each lane's chunks
//! on disk and which of their messages left, the chunks a write builds from fresh numbers,
//! and the writes of both and of their departures.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::store::chunk::{self, Departures};
use crate::store::keys::{bodies_key, key, Kind};
use crate::store::log::ops::Ops;
use crate::store::log::read::forget_read;
use crate::store::log::EntityLog;
use crate::store::record::{MessageState, Record};
use crate::store::LaneId;

/// Most message bytes in one chunk: a write with more stores several. sled splits a leaf only
/// past 16 keys and rewrites whole leaves, so big chunks make big leaves: 1 MiB chunks were
/// 10% faster than 16 KiB ones but took the broker's RSS with a 100k backlog from 130 MB to
/// 158 MB.
pub(super) const CHUNK_MAX_BYTES: usize = 16 * 1024;

/// A chunk on disk, as the log tracks it.
#[derive(Debug)]
pub(super) struct StoredChunk {
    pub(super) departures: Departures,
    /// Whether its departures key exists.
    pub(super) departures_stored: bool,
    /// No message left it since the previous compaction pass.
    pub(super) quiet: bool,
    /// Which of its messages have their bytes in the shared bodies (empty: none).
    pub(super) shared: Vec<bool>,
}

impl StoredChunk {
    fn is_shared(&self, index: u32) -> bool {
        self.shared.get(index as usize).copied().unwrap_or(false)
    }
}

/// A chunk being built by the current write; `None` marks a message deleted before it was
/// ever stored.
#[derive(Debug)]
pub(super) struct FreshChunk {
    pub(super) first: i64,
    pub(super) entries: Vec<Option<(Record, Bytes)>>,
    bytes: usize,
}

impl FreshChunk {
    pub(super) fn slot(
        chunks: &mut [FreshChunk],
        seq: i64,
    ) -> Option<&mut Option<(Record, Bytes)>> {
        let chunk = chunks
            .iter_mut()
            .find(|c| c.first <= seq && seq < c.first + c.entries.len() as i64)?;
        chunk.entries.get_mut((seq - chunk.first) as usize)
    }
}

/// A lane's chunks on disk and what the current write does to them. Only lanes that take
/// sends (not dead-letter lanes) store chunks.
#[derive(Debug)]
pub(super) struct LaneChunks {
    /// The chunks, by first sequence number.
    pub(super) stored: BTreeMap<i64, StoredChunk>,
    /// Chunks some message left during the current write.
    touched: Vec<i64>,
    /// Sequence numbers from here on were never stored in this lane: a write's puts of them
    /// form chunks.
    pub(super) fresh_from: i64,
}

impl Default for LaneChunks {
    fn default() -> Self {
        LaneChunks {
            stored: BTreeMap::new(),
            touched: Vec::new(),
            fresh_from: 1,
        }
    }
}

/// Adds a message with a fresh sequence number to the chunk this write is building, or starts
/// another when it does not follow on or the chunk is full.
pub(super) fn add_fresh(fresh: &mut Vec<FreshChunk>, seq: i64, record: Record, body: Bytes) {
    let fits = fresh.last().is_some_and(|chunk| {
        chunk.first + chunk.entries.len() as i64 == seq
            && chunk.bytes + body.len() <= CHUNK_MAX_BYTES
    });
    if !fits {
        fresh.push(FreshChunk {
            first: seq,
            entries: Vec::new(),
            bytes: 0,
        });
    }
    if let Some(chunk) = fresh.last_mut() {
        chunk.bytes += body.len();
        chunk.entries.push(Some((record, body)));
    }
}

impl EntityLog {
    /// Whether `seq` was never stored in `lane`, so that a put of it may start a chunk.
    pub(super) fn is_fresh(&self, lane: LaneId, seq: i64) -> bool {
        self.chunks
            .get(&lane)
            .is_none_or(|chunks| seq >= chunks.fresh_from)
    }

    /// Marks `seq` as gone from the chunk of `lane` holding it; returns whether it was in one.
    pub(super) fn leave_chunk(&mut self, lane: LaneId, seq: i64) -> bool {
        let Some(chunks) = self.chunks.get_mut(&lane) else {
            return false;
        };
        let Some((first, chunk)) = chunks.stored.range_mut(..=seq).next_back() else {
            return false;
        };
        let Ok(index) = u32::try_from(seq - first) else {
            return false;
        };
        if !chunk.departures.mark(index) {
            return false;
        }
        if !chunks.touched.contains(first) {
            chunks.touched.push(*first);
        }
        chunk.quiet = false;
        if chunk.is_shared(index) {
            self.release_shared(seq);
        }
        true
    }

    /// The chunk of `lane` still holding `seq`, and its index there.
    pub(super) fn chunk_of(&self, lane: LaneId, seq: i64) -> Option<(i64, usize)> {
        let (first, chunk) = self.chunks.get(&lane)?.stored.range(..=seq).next_back()?;
        let index = u32::try_from(seq - first).ok()?;
        (!chunk.departures.has_left(index)).then_some((*first, index as usize))
    }

    /// Writes a chunk built by this write, with its departures if some of it is gone already;
    /// a subscription lane's messages whose bytes are in `shared` refer to them.
    pub(super) fn store_fresh(
        &mut self,
        lane: LaneId,
        fresh: FreshChunk,
        shared: &BTreeMap<i64, Bytes>,
        batch: &mut Ops,
    ) {
        let count = u32::try_from(fresh.entries.len()).unwrap_or(u32::MAX);
        let mut departures = Departures::none(count);
        let placeholder = (
            Record {
                state: MessageState::Active,
                delivery_count: 0,
                enqueued_ms: 0,
                size: 0,
                expires_ms: 0,
                scheduled_ms: 0,
            },
            Bytes::new(),
        );
        let entries: Vec<(Record, Bytes)> = fresh
            .entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                entry.unwrap_or_else(|| {
                    departures.mark(index as u32);
                    placeholder.clone()
                })
            })
            .collect();
        if departures.live() == 0 {
            return;
        }
        let is_shared: Vec<bool> = entries
            .iter()
            .enumerate()
            .map(|(index, (_, body))| {
                let seq = fresh.first + index as i64;
                let live = !departures.has_left(index as u32);
                live && lane.subscription != 0 && shared.get(&seq) == Some(body)
            })
            .collect();
        let encoded: Vec<(&Record, Option<&[u8]>)> = entries
            .iter()
            .zip(&is_shared)
            .map(|((record, body), shared)| (record, (!shared).then_some(&body[..])))
            .collect();
        batch.insert(
            &key(Kind::Chunk, lane, fresh.first),
            chunk::encode(&encoded),
        );
        for (index, _) in is_shared.iter().enumerate().filter(|(_, shared)| **shared) {
            if let Some((_, bodies)) = self.shared_bodies_of(fresh.first + index as i64) {
                bodies.refs += 1;
            }
        }
        let departures_stored = departures.live() < count;
        if departures_stored {
            batch.insert(
                &key(Kind::Departures, lane, fresh.first),
                departures.encode(),
            );
        }
        self.chunks.entry(lane).or_default().stored.insert(
            fresh.first,
            StoredChunk {
                departures,
                departures_stored,
                quiet: false,
                shared: if is_shared.contains(&true) {
                    is_shared
                } else {
                    Vec::new()
                },
            },
        );
    }

    /// Writes the departures of the chunks messages left; an emptied chunk goes.
    pub(super) fn store_departures(&mut self, batch: &mut Ops) {
        for (lane, chunks) in &mut self.chunks {
            for first in std::mem::take(&mut chunks.touched) {
                let Some(chunk) = chunks.stored.get_mut(&first) else {
                    continue;
                };
                if chunk.departures.live() > 0 {
                    let departures = chunk.departures.encode();
                    batch.insert(&key(Kind::Departures, *lane, first), departures);
                    chunk.departures_stored = true;
                    continue;
                }
                let chunk_key = key(Kind::Chunk, *lane, first);
                batch.remove(&chunk_key);
                if chunk.departures_stored {
                    batch.remove(&key(Kind::Departures, *lane, first));
                }
                chunks.stored.remove(&first);
                forget_read(&mut self.last_read, &chunk_key);
            }
        }
        // After the departures: a prefix never loses bytes a message still refers to.
        for first in std::mem::take(&mut self.released) {
            let bodies_key = bodies_key(first);
            batch.remove(&bodies_key);
            forget_read(&mut self.last_read, &bodies_key);
        }
    }
}
