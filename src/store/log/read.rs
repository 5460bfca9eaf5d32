//! The read path: a message's bytes from the body cache, the staged puts, its chunk (or the
//! shared bodies it refers to) or its own key; the chunk or shared bodies read last are kept,
//! as deliveries read a chunk's messages one after another.

use bytes::Bytes;

use crate::store::chunk;
use crate::store::keys::{key, seq_of, Key, Kind};
use crate::store::log::EntityLog;
use crate::store::record::Record;
use crate::store::{LaneId, StoreError};

impl EntityLog {
    /// [`Bodies::body`](crate::store::Bodies::body): from the body cache, the staged puts, or the
    /// tree.
    pub(super) fn body(&mut self, lane: LaneId, seq: i64) -> Result<Bytes, StoreError> {
        if let Some(body) = self
            .cache
            .bodies
            .get(&(lane, seq))
            .or_else(|| self.staged_bodies.get(&(lane, seq)))
        {
            return Ok(body.clone());
        }
        self.stored_body(lane, seq)?
            .ok_or_else(|| StoreError::MissingBody {
                entity: self.entity.clone(),
                seq,
            })
    }

    /// The bytes of a message on disk, in its chunk (or the shared bodies it refers to) or
    /// under its own key.
    pub(super) fn stored_body(
        &mut self,
        lane: LaneId,
        seq: i64,
    ) -> Result<Option<Bytes>, StoreError> {
        if !lane.dead_letter {
            if let Some((first, index)) = self.chunk_of(lane, seq) {
                let value = self.value(key(Kind::Chunk, lane, first))?;
                let entries = self.decode(first, chunk::decode(&value))?;
                return match entries.get(index) {
                    Some((_, Some(range))) => {
                        Ok(Some(Bytes::copy_from_slice(&value[range.clone()])))
                    }
                    Some((_, None)) => self.shared_body(seq).map(Some),
                    None => Ok(None),
                };
            }
        }
        let Some(tree) = &self.tree else {
            return Ok(None);
        };
        match tree.get(key(Kind::Own, lane, seq))? {
            Some(value) => {
                let (_, at) = Record::decode(&value).map_err(|error| StoreError::Record {
                    entity: self.entity.clone(),
                    seq,
                    error,
                })?;
                Ok(Some(Bytes::copy_from_slice(&value[at..])))
            }
            None => Ok(None),
        }
    }

    /// The stored value of a chunk or of shared bodies (the last one read is kept).
    pub(super) fn value(&mut self, key: Key) -> Result<sled::IVec, StoreError> {
        if let Some((read, value)) = &self.last_read {
            if read[..] == key[..] {
                return Ok(value.clone());
            }
        }
        let first = seq_of(&key);
        let tree = self.tree.as_ref().ok_or_else(|| self.missing(first))?;
        let value = tree.get(key)?.ok_or_else(|| self.missing(first))?;
        self.last_read = Some((key, value.clone()));
        Ok(value)
    }
}

/// Forgets the value read last if it was `key`'s.
pub(super) fn forget_read(last_read: &mut Option<(Key, sled::IVec)>, key: &Key) {
    if last_read
        .as_ref()
        .is_some_and(|(read, _)| read[..] == key[..])
    {
        *last_read = None;
    }
}
