//! The write path: changes staged, then planned into sled operations ([`Ops`]) and committed.
//!
//! A write is either single operations in a crash-safe order or one atomic sled batch (see
//! [`Ops`]): no crash leaves a message without the counter that numbered it, or in two places.

use std::collections::BTreeMap;

use bytes::Bytes;
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;

use crate::store::keys::{accepted_key, key, rule_key, session_state_prefix, Kind, NEXT_SEQ_KEY};
use crate::store::log::chunks::{add_fresh, FreshChunk};
use crate::store::log::ops::Ops;
use crate::store::log::values::{encode_accepted, encode_state, own_value};
use crate::store::log::EntityLog;
use crate::store::{Change, LaneId, StoreError};

impl EntityLog {
    /// [`Log::stage`](crate::store::Log::stage): the staged puts' bytes answer reads until the
    /// commit.
    ///
    /// Every sled batch costs two writes of its own to the log file (sled 0.34 seals its
    /// buffer before and after a batch's manifest), so a `sync` entity stages the changes of
    /// all its turns and commits them once, just before it asks for a flush.
    pub(super) fn stage(&mut self, changes: Vec<(LaneId, Change)>, moves: bool) {
        for (sub, change) in &changes {
            self.cache.apply(*sub, change);
        }
        if self.tree.is_none() {
            return;
        }
        for (sub, change) in &changes {
            match change.bytes() {
                Some((seq, Some(body))) => {
                    self.staged_bodies.insert((*sub, seq), body.clone());
                }
                Some((seq, None)) => {
                    self.staged_bodies.remove(&(*sub, seq));
                }
                None => {}
            }
        }
        self.staged_moves |= moves;
        self.staged.extend(changes);
    }

    /// [`Log::commit`](crate::store::Log::commit): single operations in a crash-safe order, or one
    /// atomic batch when they move a message (see [`Ops`]).
    pub(super) fn commit(&mut self) -> Result<(), StoreError> {
        let changes = std::mem::take(&mut self.staged);
        let moves = std::mem::take(&mut self.staged_moves);
        let written = self.write_staged(changes, moves);
        self.staged_bodies.clear();
        written
    }

    fn write_staged(
        &mut self,
        changes: Vec<(LaneId, Change)>,
        moves: bool,
    ) -> Result<(), StoreError> {
        let Some(tree) = self.tree.clone() else {
            return Ok(());
        };
        if changes.is_empty() {
            return Ok(());
        }
        self.plan(changes, moves)?.apply(&tree)
    }

    /// The sled operations that write `changes`; the log's own bookkeeping (chunks and their
    /// departures) is updated as if they were applied.
    pub(super) fn plan(
        &mut self,
        changes: Vec<(LaneId, Change)>,
        moves: bool,
    ) -> Result<Ops, StoreError> {
        let mut batch = Ops {
            atomic: moves,
            ..Ops::default()
        };
        let mut next_seq = None;
        // Accepted message ids, written after the messages that brought them.
        let mut accepted = Vec::new();
        let mut fresh: BTreeMap<LaneId, Vec<FreshChunk>> = BTreeMap::new();
        // Messages given their own key in this batch, which a later update must start from.
        let mut own: FastMap<(LaneId, i64), Bytes> = FastMap::new();
        for (lane, change) in changes {
            let chunked = !lane.dead_letter;
            let lane_fresh = fresh.entry(lane).or_default();
            match change {
                Change::Put { seq, record, body } if chunked && self.is_fresh(lane, seq) => {
                    self.chunks.entry(lane).or_default().fresh_from = seq + 1;
                    add_fresh(lane_fresh, seq, record, body);
                }
                Change::Put { seq, record, body } => {
                    if chunked {
                        if let Some(slot) = FreshChunk::slot(lane_fresh, seq) {
                            *slot = Some((record, body));
                            continue;
                        }
                        self.leave_chunk(lane, seq);
                    }
                    let value = own_value(&record, &body);
                    batch.insert_moved(&key(Kind::Own, lane, seq), value);
                    own.insert((lane, seq), body);
                }
                Change::Update { seq, record } => {
                    if chunked {
                        if let Some(slot) = FreshChunk::slot(lane_fresh, seq) {
                            if let Some((stored, _)) = slot {
                                *stored = record;
                            }
                            continue;
                        }
                    }
                    let body = match own.get(&(lane, seq)) {
                        Some(body) => Some(body.clone()),
                        None => self.stored_body(lane, seq)?,
                    };
                    if let Some(body) = body {
                        if chunked {
                            self.leave_chunk(lane, seq);
                        }
                        let value = own_value(&record, &body);
                        batch.insert_moved(&key(Kind::Own, lane, seq), value);
                        own.insert((lane, seq), body);
                    }
                }
                Change::Delete { seq } => {
                    if chunked {
                        if let Some(slot) = FreshChunk::slot(lane_fresh, seq) {
                            *slot = None;
                            continue;
                        }
                        if self.leave_chunk(lane, seq) {
                            continue;
                        }
                    }
                    own.remove(&(lane, seq));
                    batch.remove(&key(Kind::Own, lane, seq));
                }
                Change::NextSeq(next) => next_seq = Some(next),
                Change::Rule { name, stored } => {
                    let key = rule_key(lane, &name);
                    match stored {
                        Some(stored) => batch.insert(&key, stored.to_vec()),
                        None => batch.remove(&key),
                    }
                }
                Change::Accepted { accepted_ms, ids } => {
                    accepted.push((accepted_key(accepted_ms), encode_accepted(&ids)));
                }
                Change::Forgotten(accepted_ms) => batch.remove(&accepted_key(accepted_ms)),
                Change::SessionState { session, state } => {
                    let mut key = session_state_prefix(lane);
                    key.extend_from_slice(session.as_bytes());
                    match state {
                        Some(state) => batch.insert(&key, encode_state(&state)),
                        None => batch.remove(&key),
                    }
                }
            }
        }
        if let Some(next) = next_seq {
            // First: a prefix that deletes the newest message still knows its number was used.
            let value = sled::IVec::from(&next.to_be_bytes()[..]);
            batch.list.insert(0, (NEXT_SEQ_KEY.into(), Some(value)));
        }
        // Shared bodies before the chunks that refer to them.
        let shared = self.store_shared(&fresh, &mut batch);
        for (lane, chunks) in fresh {
            for chunk in chunks {
                self.store_fresh(lane, chunk, &shared, &mut batch);
            }
        }
        self.store_departures(&mut batch);
        // Last: a prefix that keeps an id keeps its message, so a retry is never dropped for a
        // message that was lost. A prefix may keep a message without its id; its sender was
        // not acknowledged (that waits for the whole write), and its retry is stored again.
        for (key, value) in accepted {
            batch.insert(&key, value);
        }
        Ok(batch)
    }
}
