//! The sessions of a lane that requires them (design.md D8): which messages each session
//! holds and which of those are available, who holds each session's lock and until when,
//! session state, and the index of unlocked sessions with an available message, ordered by
//! that message, so that "the next available session" is the first entry (O(log n) in the
//! number of sessions, as every operation here).
//!
//! The lane ([`QueueCore`](crate::entity::queue::QueueCore)) keeps the records and the
//! message locks; this keeps only sequence numbers and session ids.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use crate::entity::terms::{ConsumerId, EntityError, SessionId};
use crate::store::StoredState;

/// Most characters of a session id, as in Service Bus.
pub const MAX_SESSION_ID_CHARS: usize = 128;

/// One session.
#[derive(Debug, Default)]
struct Session {
    /// Every message of the session in the lane, in any state.
    messages: BTreeSet<i64>,
    /// Its unlocked active messages, in delivery order.
    available: BTreeSet<i64>,
    /// Its lock, while a receiver holds it.
    lock: Option<SessionLock>,
    /// Its state (`set-session-state`) and when it was set.
    state: Option<StoredState>,
    /// Its key in [`Sessions::free`], while it is there.
    free_at: Option<i64>,
}

impl Session {
    /// Whether nothing keeps the session: no message, no state, no lock.
    fn is_unused(&self) -> bool {
        self.messages.is_empty() && self.state.is_none() && self.lock.is_none()
    }
}

/// A session's lock: the consumer (session receiver) holding it, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLock {
    /// The session receiver.
    pub holder: ConsumerId,
    /// When the lock ends unless renewed, in ms since the Unix epoch.
    pub until_ms: i64,
}

/// A lane's sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Every session with messages, state or a lock, by id (ordered, so that listing them
    /// in pages is stable).
    table: BTreeMap<SessionId, Session>,
    /// (first available message, id) of each unlocked session with an available message.
    free: BTreeSet<(i64, SessionId)>,
    /// (lock end, id) of each locked session.
    lock_ends: BTreeSet<(i64, SessionId)>,
    /// The session each session receiver holds.
    held: HashMap<ConsumerId, SessionId>,
}

impl Sessions {
    /// The shared id of `id`, the one the table keeps when it has the session.
    pub fn intern(&self, id: &str) -> SessionId {
        self.table
            .get_key_value(id)
            .map_or_else(|| Arc::from(id), |(kept, _)| kept.clone())
    }

    /// Files message `seq` in its session (not available yet).
    pub fn add_message(&mut self, id: &SessionId, seq: i64) {
        self.table
            .entry(id.clone())
            .or_default()
            .messages
            .insert(seq);
    }

    /// Takes message `seq` out of its session; a session left unused goes.
    pub fn remove_message(&mut self, id: &str, seq: i64) {
        if let Some(session) = self.table.get_mut(id) {
            session.messages.remove(&seq);
            session.available.remove(&seq);
        }
        self.refresh(id);
    }

    /// Message `seq` of session `id` can be delivered (unlocked and active).
    pub fn make_available(&mut self, id: &str, seq: i64) {
        if let Some(session) = self.table.get_mut(id) {
            session.available.insert(seq);
        }
        self.refresh(id);
    }

    /// Message `seq` of session `id` cannot be delivered now (locked, deferred, gone).
    pub fn make_unavailable(&mut self, id: &str, seq: i64) {
        if let Some(session) = self.table.get_mut(id) {
            session.available.remove(&seq);
        }
        self.refresh(id);
    }

    /// The first available message of session `id`.
    pub fn first_available(&self, id: &str) -> Option<i64> {
        self.table.get(id)?.available.first().copied()
    }

    /// The messages of session `id`, in order.
    pub fn messages(&self, id: &str) -> impl Iterator<Item = i64> + '_ {
        self.table
            .get(id)
            .into_iter()
            .flat_map(|session| session.messages.iter().copied())
    }

    /// The unlocked session whose first available message comes first, if that message is
    /// numbered below `visible_below` (durable: deliverable).
    pub fn next_free(&self, visible_below: i64) -> Option<SessionId> {
        self.free
            .first()
            .filter(|(seq, _)| *seq < visible_below)
            .map(|(_, id)| id.clone())
    }

    /// Locks session `id` for `holder` until `until_ms` (the session need not have messages).
    ///
    /// # Errors
    /// [`EntityError::SessionCannotBeLocked`] when another receiver holds it.
    pub fn lock(
        &mut self,
        id: &SessionId,
        holder: ConsumerId,
        until_ms: i64,
    ) -> Result<(), EntityError> {
        let session = self.table.entry(id.clone()).or_default();
        if session.lock.is_some_and(|lock| lock.holder != holder) {
            return Err(EntityError::SessionCannotBeLocked(id.to_string()));
        }
        if let Some(old) = session.lock.replace(SessionLock { holder, until_ms }) {
            self.lock_ends.remove(&(old.until_ms, id.clone()));
        }
        self.lock_ends.insert((until_ms, id.clone()));
        self.held.insert(holder, id.clone());
        self.refresh(id);
        Ok(())
    }

    /// Releases the session `holder` holds; returns its id. Its messages' locks are the
    /// lane's to release.
    pub fn unlock(&mut self, holder: ConsumerId) -> Option<SessionId> {
        let id = self.held.remove(&holder)?;
        if let Some(session) = self.table.get_mut(&id) {
            if let Some(lock) = session.lock.take() {
                self.lock_ends.remove(&(lock.until_ms, id.clone()));
            }
        }
        self.refresh(&id);
        Some(id)
    }

    /// The session `holder` holds.
    pub fn held_by(&self, holder: ConsumerId) -> Option<&SessionId> {
        self.held.get(&holder)
    }

    /// The lock of session `id`, if it is held.
    pub fn lock_of(&self, id: &str) -> Option<SessionLock> {
        self.table.get(id)?.lock
    }

    /// Extends the lock of session `id` to `until_ms`.
    ///
    /// # Errors
    /// [`EntityError::SessionLockLost`] when nobody holds it.
    pub fn renew(&mut self, id: &str, until_ms: i64) -> Result<(), EntityError> {
        let (kept, session) = self
            .table
            .get_key_value(id)
            .ok_or_else(|| EntityError::SessionLockLost(id.to_string()))?;
        let lock = session
            .lock
            .ok_or_else(|| EntityError::SessionLockLost(id.to_string()))?;
        let kept = kept.clone();
        self.lock_ends.remove(&(lock.until_ms, kept.clone()));
        self.lock_ends.insert((until_ms, kept.clone()));
        if let Some(session) = self.table.get_mut(&kept) {
            session.lock = Some(SessionLock { until_ms, ..lock });
        }
        Ok(())
    }

    /// The holders of the session locks that end by `now_ms`.
    pub fn lapsed(&self, now_ms: i64) -> Vec<ConsumerId> {
        self.lock_ends
            .iter()
            .take_while(|(until, _)| *until <= now_ms)
            .filter_map(|(_, id)| self.table.get(id)?.lock.map(|lock| lock.holder))
            .collect()
    }

    /// When the next session lock ends.
    pub fn next_lock_end_ms(&self) -> Option<i64> {
        self.lock_ends.first().map(|(until, _)| *until)
    }

    /// The state of session `id`.
    pub fn state(&self, id: &str) -> Option<Bytes> {
        Some(self.table.get(id)?.state.as_ref()?.state.clone())
    }

    /// Sets (or with `None` clears) the state of session `id`.
    pub fn set_state(&mut self, id: &SessionId, state: Option<StoredState>) {
        self.table.entry(id.clone()).or_default().state = state;
        self.refresh(id);
    }

    /// Up to `top` ids, after the first `skip`, of the sessions with messages or state, or
    /// with `updated_after`, of those whose state was set after that time (ms).
    pub fn ids(&self, skip: usize, top: usize, updated_after: Option<i64>) -> Vec<String> {
        let listed = |session: &Session| match (updated_after, &session.state) {
            (None, state) => !session.messages.is_empty() || state.is_some(),
            (Some(after), Some(state)) => state.updated_ms > after,
            (Some(_), None) => false,
        };
        self.table
            .iter()
            .filter(|(_, session)| listed(session))
            .skip(skip)
            .take(top)
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// How many sessions the table keeps.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the table keeps no session.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Puts session `id` where its messages and lock say in the free index, and forgets it
    /// when it is unused.
    fn refresh(&mut self, id: &str) {
        let Some((kept, session)) = self.table.get_key_value(id) else {
            return;
        };
        let kept = kept.clone();
        let free_at = match session.lock {
            Some(_) => None,
            None => session.available.first().copied(),
        };
        let (old, unused) = (session.free_at, session.is_unused());
        if old != free_at {
            if let Some(old) = old {
                self.free.remove(&(old, kept.clone()));
            }
            if let Some(at) = free_at {
                self.free.insert((at, kept.clone()));
            }
            if let Some(session) = self.table.get_mut(&kept) {
                session.free_at = free_at;
            }
        }
        if unused {
            self.table.remove(&kept);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> SessionId {
        Arc::from(text)
    }

    #[test]
    fn the_next_free_session_is_the_one_with_the_oldest_available_message() {
        let mut sessions = Sessions::default();
        for (session, seq) in [("b", 1), ("a", 2), ("b", 3), ("c", 4)] {
            sessions.add_message(&id(session), seq);
            sessions.make_available(session, seq);
        }
        assert_eq!(sessions.next_free(10).as_deref(), Some("b"));
        assert_eq!(sessions.next_free(1), None, "message 1 is not durable yet");
        sessions.lock(&id("b"), ConsumerId(1), 100).expect("lock");
        assert_eq!(sessions.next_free(10).as_deref(), Some("a"));
        assert_eq!(
            sessions.lock(&id("b"), ConsumerId(2), 100),
            Err(EntityError::SessionCannotBeLocked("b".into()))
        );
        sessions.make_unavailable("a", 2);
        assert_eq!(sessions.next_free(10).as_deref(), Some("c"));
        assert_eq!(sessions.unlock(ConsumerId(1)).as_deref(), Some("b"));
        assert_eq!(sessions.next_free(10).as_deref(), Some("b"));
    }

    #[test]
    fn a_session_lasts_while_it_has_messages_state_or_a_lock() {
        let mut sessions = Sessions::default();
        let s = id("s");
        sessions.add_message(&s, 1);
        let state = StoredState {
            state: Bytes::from_static(b"x"),
            updated_ms: 5,
        };
        sessions.set_state(&s, Some(state));
        sessions.remove_message("s", 1);
        assert_eq!(
            sessions.ids(0, 10, None),
            vec!["s".to_string()],
            "state keeps it"
        );
        assert_eq!(sessions.ids(0, 10, Some(4)), vec!["s".to_string()]);
        assert!(
            sessions.ids(0, 10, Some(5)).is_empty(),
            "set at 5, not after"
        );
        sessions.lock(&s, ConsumerId(7), 50).expect("lock");
        sessions.set_state(&s, None);
        assert_eq!(sessions.len(), 1, "the lock keeps it");
        assert!(sessions.ids(0, 10, None).is_empty(), "but it is not listed");
        sessions.unlock(ConsumerId(7));
        assert!(sessions.is_empty());
    }

    #[test]
    fn locks_lapse_in_order_and_renewal_moves_them() {
        let mut sessions = Sessions::default();
        sessions.lock(&id("a"), ConsumerId(1), 100).expect("lock");
        sessions.lock(&id("b"), ConsumerId(2), 50).expect("lock");
        assert_eq!(sessions.next_lock_end_ms(), Some(50));
        assert_eq!(sessions.lapsed(60), vec![ConsumerId(2)]);
        sessions.renew("b", 200).expect("renew");
        assert_eq!(sessions.lapsed(150), vec![ConsumerId(1)]);
        assert_eq!(
            sessions.renew("c", 10),
            Err(EntityError::SessionLockLost("c".into()))
        );
        assert_eq!(sessions.held_by(ConsumerId(2)).map(|s| &**s), Some("b"));
    }

    #[test]
    fn ids_are_listed_in_pages() {
        let mut sessions = Sessions::default();
        for (n, name) in ["c", "a", "b"].into_iter().enumerate() {
            sessions.add_message(&id(name), n as i64);
        }
        assert_eq!(
            sessions.ids(0, 2, None),
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(sessions.ids(2, 2, None), vec!["c".to_string()]);
        assert!(sessions.ids(3, 2, None).is_empty());
        assert!(sessions.ids(0, 2, Some(0)).is_empty(), "no state was set");
    }
}
