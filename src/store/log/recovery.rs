//! Recovery: an entity's lanes, chunks, shared bodies, session states and accepted ids read
//! back from its tree at start.

use std::collections::HashMap;
use std::time::Instant;

use crate::store::chunk::{self, Departures};
use crate::store::keys::{
    be_i64, bodies_key, key, lane_of, prefix, seq_of, session_state_prefix, Kind, ACCEPTED_PREFIX,
    BODIES_PREFIX, NEXT_SEQ_KEY,
};
use crate::store::log::chunks::StoredChunk;
use crate::store::log::shared::SharedBodies;
use crate::store::log::values::{decode_accepted, decode_state};
use crate::store::log::EntityLog;
use crate::store::record::Record;
use crate::store::{AcceptedIds, LaneId, Recovered, StoreError};

impl EntityLog {
    /// [`Log::recover`](crate::store::Log::recover): reads every record of the lane back (sled
    /// modes) and logs, at debug, how long it took.
    pub(super) fn recover(&mut self, lane: LaneId) -> Result<Recovered, StoreError> {
        let Some(tree) = self.tree.clone() else {
            return Ok(Recovered {
                next_seq: 1,
                ..Recovered::default()
            });
        };
        let started = Instant::now();
        let next_seq = match tree.get(NEXT_SEQ_KEY)? {
            Some(raw) if raw.len() == 8 => be_i64(&raw),
            _ => 1,
        };
        let mut records = Vec::new();
        if !lane.dead_letter {
            self.recover_chunks(&tree, lane.subscription != 0)?;
            records = self.recovered.remove(&lane).unwrap_or_default();
        }
        for item in tree.scan_prefix(prefix(Kind::Own, lane)) {
            let (key, value) = item?;
            let seq = seq_of(&key);
            let (record, _) = Record::decode(&value).map_err(|error| StoreError::Record {
                entity: self.entity.clone(),
                seq,
                error,
            })?;
            records.push((seq, record));
        }
        let mut session_states = Vec::new();
        if !lane.dead_letter {
            let prefix = session_state_prefix(lane);
            for item in tree.scan_prefix(&prefix) {
                let (key, value) = item?;
                let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                session_states.push((id, decode_state(&value)));
            }
        }
        let highest = records.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
        if !lane.dead_letter {
            let chunks = self.chunks.entry(lane).or_default();
            chunks.fresh_from = chunks.fresh_from.max(next_seq).max(highest + 1);
        }
        tracing::debug!(
            entity = %self.entity,
            %lane,
            messages = records.len(),
            next_seq,
            elapsed = ?started.elapsed(),
            "recovered"
        );
        Ok(Recovered {
            next_seq,
            records,
            sessions: HashMap::new(),
            session_states,
        })
    }

    /// [`Log::accepted_ids`](crate::store::Log::accepted_ids): none in `memory` mode.
    pub(super) fn accepted_ids(&self) -> Result<Vec<(i64, AcceptedIds)>, StoreError> {
        let Some(tree) = &self.tree else {
            return Ok(Vec::new());
        };
        let mut accepted = Vec::new();
        for item in tree.scan_prefix([ACCEPTED_PREFIX]) {
            let (key, value) = item?;
            if let Some(at) = key.get(1..9) {
                accepted.push((be_i64(at), decode_accepted(&value)));
            }
        }
        Ok(accepted)
    }

    /// [`Log::end_recovery`](crate::store::Log::end_recovery): the messages of subscriptions no
    /// longer declared stay on disk, and come back if they are declared again.
    pub(super) fn end_recovery(&mut self) {
        let left: usize = self.recovered.values().map(Vec::len).sum();
        if left > 0 {
            tracing::warn!(
                entity = %self.entity,
                messages = left,
                "messages of subscriptions no longer declared stay on disk"
            );
        }
        self.recovered = HashMap::new();
    }

    /// Reads back the chunks and departures of the queue lane, or of every subscription lane
    /// on disk (declared or not) with the shared bodies they refer to; the records still in
    /// them wait in `recovered`. Departures whose chunk is gone and shared bodies nothing
    /// refers to (a crash came between the removals) are removed.
    fn recover_chunks(&mut self, tree: &sled::Tree, subscriptions: bool) -> Result<(), StoreError> {
        if std::mem::replace(&mut self.chunks_read[usize::from(subscriptions)], true) {
            return Ok(());
        }
        let family = LaneId {
            subscription: u32::from(subscriptions),
            dead_letter: false,
        };
        let chunk_prefix = &prefix(Kind::Chunk, family)[..1];
        let departures_prefix = &prefix(Kind::Departures, family)[..1];
        if subscriptions {
            for item in tree.scan_prefix([BODIES_PREFIX]) {
                let (key, value) = item?;
                let first = seq_of(&key);
                let count = self.decode(first, chunk::decode_bodies(&value))?.len();
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                self.shared.insert(first, SharedBodies { count, refs: 0 });
            }
        }
        let mut departures = HashMap::new();
        for item in tree.scan_prefix(departures_prefix) {
            let (key, value) = item?;
            departures.insert(key, value);
        }
        for item in tree.scan_prefix(chunk_prefix) {
            let (chunk_key, value) = item?;
            let (lane, first) = (lane_of(&chunk_key), seq_of(&chunk_key));
            let entries = self.decode(first, chunk::decode(&value))?;
            let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
            let departures_key = key(Kind::Departures, lane, first);
            let stored = departures.remove(&departures_key[..]);
            let gone = stored.as_ref().map_or_else(
                || Departures::none(count),
                |bits| Departures::decode(bits, count),
            );
            let records = self.recovered.entry(lane).or_default();
            let mut refers = Vec::new();
            for (index, (record, range)) in entries.iter().enumerate() {
                let seq = first + index as i64;
                if gone.has_left(index as u32) {
                    continue;
                }
                records.push((seq, *record));
                if range.is_none() {
                    refers.push(seq);
                }
            }
            for seq in refers {
                let first = self.shared_first(seq).ok_or_else(|| self.missing(seq))?;
                if let Some(bodies) = self.shared.get_mut(&first) {
                    bodies.refs += 1;
                }
            }
            self.chunks.entry(lane).or_default().stored.insert(
                first,
                StoredChunk {
                    departures: gone,
                    departures_stored: stored.is_some(),
                    quiet: false,
                    shared: entries.iter().map(|(_, range)| range.is_none()).collect(),
                },
            );
        }
        for key in departures.into_keys() {
            tree.remove(key)?;
        }
        let unused: Vec<i64> = self
            .shared
            .iter()
            .filter(|(_, bodies)| bodies.refs == 0)
            .map(|(first, _)| *first)
            .collect();
        for first in unused {
            self.shared.remove(&first);
            tree.remove(bodies_key(first))?;
        }
        Ok(())
    }
}
