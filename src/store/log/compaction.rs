//! Compaction: the messages of nearly empty, quiet chunks moved to their own keys so that
//! those chunks can go, and the body cache's spare capacity given back.

use bytes::Bytes;

use crate::store::chunk;
use crate::store::keys::{key, Kind};
use crate::store::log::ops::Ops;
use crate::store::log::values::own_value;
use crate::store::log::EntityLog;
use crate::store::StoreError;

/// A chunk still holding at most this fraction (1/n) of its messages, and left alone since
/// the previous compaction, has them moved to their own keys so that it can go: a few
/// long-lived messages (deferred ones, say) never pin many dead ones on disk.
pub(super) const COMPACT_BELOW_ONE_IN: u32 = 4;

impl EntityLog {
    /// [`Log::compact`](crate::store::Log::compact): moves the messages of nearly empty, quiet
    /// chunks to their own keys and drops those chunks (one atomic batch), and gives back the body
    /// cache's spare capacity.
    pub(super) fn compact(&mut self) -> Result<(), StoreError> {
        crate::trimmer::shrink_if_sparse(&mut self.cache.bodies);
        self.commit()?;
        let Some(tree) = self.tree.clone() else {
            return Ok(());
        };
        let mut due = Vec::new();
        for (lane, chunks) in &mut self.chunks {
            for (first, chunk) in &mut chunks.stored {
                let live = chunk.departures.live();
                let sparse = live * COMPACT_BELOW_ONE_IN <= chunk.departures.count();
                if chunk.quiet && sparse {
                    due.push((*lane, *first));
                }
                chunk.quiet = true;
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        let mut batch = Ops::default();
        for (lane, first) in &due {
            let value = self.value(key(Kind::Chunk, *lane, *first))?;
            let entries = self.decode(*first, chunk::decode(&value))?;
            for (index, (record, range)) in entries.into_iter().enumerate() {
                let seq = first + index as i64;
                if self.chunk_of(*lane, seq).is_none() {
                    continue;
                }
                let body = match range {
                    Some(range) => Bytes::copy_from_slice(&value[range]),
                    None => self.shared_body(seq)?,
                };
                self.leave_chunk(*lane, seq);
                let own = own_value(&record, &body);
                batch.insert_moved(&key(Kind::Own, *lane, seq), own);
            }
        }
        self.store_departures(&mut batch);
        tracing::debug!(chunks = due.len(), "compacted");
        batch.apply(&tree)
    }
}
