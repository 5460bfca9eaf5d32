//! The sled operations one write of the log is planned into, and how they are applied: as
//! single operations in a crash-safe order, or as one atomic batch.

use crate::store::StoreError;

/// The sled operations of one write, in the order they are applied.
///
/// A sled batch is atomic but costs two writes of its own to the log file, so a write that
/// only adds messages, marks them gone and raises the sequence counter goes as single
/// operations instead, ordered so that every prefix of them is a state to recover from:
/// the counter first, then new chunks, then departures, each chunk's key before its
/// departures key. sled recovers its log up to the first tear, so a crash keeps such a
/// prefix, and loses only changes that nobody was told about yet. A write that moves a message
/// (stores it under a key of its own, in the dead-letter queue, or under a new number) would
/// hold two copies in some prefix, so it goes as one batch.
#[derive(Debug, Default)]
pub(super) struct Ops {
    pub(super) list: Vec<(sled::IVec, Option<sled::IVec>)>,
    /// Some operation moves a message: apply them as one atomic batch.
    pub(super) atomic: bool,
}

impl Ops {
    pub(super) fn insert(&mut self, key: &[u8], value: impl Into<sled::IVec>) {
        self.list.push((key.into(), Some(value.into())));
    }

    /// Stores a message that is still somewhere else until this write lands.
    pub(super) fn insert_moved(&mut self, key: &[u8], value: impl Into<sled::IVec>) {
        self.atomic = true;
        self.insert(key, value);
    }

    pub(super) fn remove(&mut self, key: &[u8]) {
        self.list.push((key.into(), None));
    }

    pub(super) fn apply(self, tree: &sled::Tree) -> Result<(), StoreError> {
        if self.atomic {
            let mut batch = sled::Batch::default();
            for (key, value) in self.list {
                match value {
                    Some(value) => batch.insert(key, value),
                    None => batch.remove(key),
                }
            }
            return Ok(tree.apply_batch(batch)?);
        }
        for (key, value) in self.list {
            match value {
                Some(value) => tree.insert(key, value)?,
                None => tree.remove(key)?,
            };
        }
        Ok(())
    }
}
