//! Shared bodies (the format is in [`crate::store::chunk`]): a topic's message bytes that
//! several subscriptions store alike in one write, kept once, counted by the messages still
//! in chunks that refer to them, and released when none does.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::store::chunk;
use crate::store::keys::bodies_key;
use crate::store::log::chunks::{FreshChunk, CHUNK_MAX_BYTES};
use crate::store::log::ops::Ops;
use crate::store::log::EntityLog;
use crate::store::{LaneId, StoreError};

/// Most numbers without shared bytes between two with, in one value of shared bodies.
const BODIES_MAX_GAP: i64 = 64;

/// Shared bodies on disk (see [`crate::store::chunk`]).
#[derive(Debug)]
pub(super) struct SharedBodies {
    /// How many numbers they cover.
    pub(super) count: u32,
    /// How many messages still in chunks refer to them.
    pub(super) refs: u32,
}

impl EntityLog {
    /// One message fewer refers to the shared bodies holding `seq`; unused, they go with the
    /// next departures.
    pub(super) fn release_shared(&mut self, seq: i64) {
        let Some((first, bodies)) = self.shared_bodies_of(seq) else {
            return;
        };
        bodies.refs = bodies.refs.saturating_sub(1);
        if bodies.refs == 0 {
            self.shared.remove(&first);
            self.released.push(first);
        }
    }

    /// The shared bodies holding `seq`, and their first number.
    pub(super) fn shared_bodies_of(&mut self, seq: i64) -> Option<(i64, &mut SharedBodies)> {
        let first = self.shared_first(seq)?;
        self.shared.get_mut(&first).map(|bodies| (first, bodies))
    }

    /// The first number of the shared bodies holding `seq`.
    pub(super) fn shared_first(&self, seq: i64) -> Option<i64> {
        let (first, bodies) = self.shared.range(..=seq).next_back()?;
        (seq - first < i64::from(bodies.count)).then_some(*first)
    }

    /// Stores once the bytes that several subscription lanes' new chunks hold alike for one
    /// number, and returns them by number.
    pub(super) fn store_shared(
        &mut self,
        fresh: &BTreeMap<LaneId, Vec<FreshChunk>>,
        batch: &mut Ops,
    ) -> BTreeMap<i64, Bytes> {
        let mut copies: BTreeMap<i64, (Bytes, u32)> = BTreeMap::new();
        let subscription_chunks = fresh
            .iter()
            .filter(|(lane, _)| lane.subscription != 0)
            .flat_map(|(_, chunks)| chunks);
        for chunk in subscription_chunks {
            for (index, entry) in chunk.entries.iter().enumerate() {
                let Some((_, body)) = entry else {
                    continue;
                };
                let seq = chunk.first + index as i64;
                let (first_copy, alike) = copies.entry(seq).or_insert_with(|| (body.clone(), 0));
                if first_copy == body {
                    *alike += 1;
                }
            }
        }
        let shared: BTreeMap<i64, Bytes> = copies
            .into_iter()
            .filter(|(_, (_, alike))| *alike > 1)
            .map(|(seq, (body, _))| (seq, body))
            .collect();
        let mut piece: Vec<(i64, &Bytes)> = Vec::new();
        let mut bytes = 0;
        for (seq, body) in &shared {
            let fits = piece.last().is_some_and(|(last, _)| {
                seq - last <= BODIES_MAX_GAP && bytes + body.len() <= CHUNK_MAX_BYTES
            });
            if !fits {
                self.store_bodies(std::mem::take(&mut piece), batch);
                bytes = 0;
            }
            bytes += body.len();
            piece.push((*seq, body));
        }
        self.store_bodies(piece, batch);
        shared
    }

    /// Writes the shared bodies of ascending numbers, which the chunks stored next refer to.
    fn store_bodies(&mut self, piece: Vec<(i64, &Bytes)>, batch: &mut Ops) {
        let (Some((first, _)), Some((last, _))) = (piece.first(), piece.last()) else {
            return;
        };
        let (first, last) = (*first, *last);
        let mut bodies: Vec<&[u8]> = vec![&[]; (last - first + 1) as usize];
        for (seq, body) in &piece {
            bodies[(seq - first) as usize] = body;
        }
        batch.insert(&bodies_key(first), chunk::encode_bodies(&bodies));
        let count = u32::try_from(bodies.len()).unwrap_or(u32::MAX);
        self.shared.insert(first, SharedBodies { count, refs: 0 });
    }

    /// The shared bytes of `seq`.
    pub(super) fn shared_body(&mut self, seq: i64) -> Result<Bytes, StoreError> {
        let first = self.shared_first(seq).ok_or_else(|| self.missing(seq))?;
        let value = self.value(bodies_key(first))?;
        let bodies = self.decode(first, chunk::decode_bodies(&value))?;
        let range = bodies
            .get((seq - first) as usize)
            .ok_or_else(|| self.missing(seq))?;
        Ok(Bytes::copy_from_slice(&value[range.clone()]))
    }
}
