//! What a lane that requires sessions does differently (design.md D8): each session receiver
//! holds one session and takes only its messages, in order; the session lock, not each
//! message's, bounds how long its messages stay locked; the next available session is the
//! unlocked one whose oldest available message came first.

use bytes::Bytes;

use super::QueueCore;
use crate::entity::sessions::{SessionLock, Sessions, MAX_SESSION_ID_CHARS};
use crate::entity::terms::{ConsumerId, Delivery, EntityError, SessionId};
use crate::store::{Change, StoredState};

/// A session receiver's binding: the session and when its lock ends, or why there is none.
pub type Binding = Result<(SessionId, i64), EntityError>;

impl QueueCore {
    /// Whether messages are received through sessions here.
    pub fn requires_session(&self) -> bool {
        self.sessions.is_some()
    }

    /// Binds a session receiver to the session it names, or (`None`) to the next available
    /// one; returns the session and when its lock ends, or `None` when the receiver waits for
    /// one until `now_ms + timeout_ms` ([`QueueCore::bind_waiting`] answers it later).
    ///
    /// # Errors
    /// [`EntityError::SessionMismatch`] on a lane without sessions,
    /// [`EntityError::SessionIdTooLong`], and [`EntityError::SessionCannotBeLocked`] when
    /// another receiver holds the named session.
    pub fn accept_session(
        &mut self,
        consumer: ConsumerId,
        wanted: Option<&str>,
        timeout_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(SessionId, i64)>, EntityError> {
        let until_ms = now_ms.saturating_add(self.rules.lock_duration_ms);
        let visible_below = self.visible_below;
        let table = self.sessions.as_mut().ok_or_else(|| {
            EntityError::SessionMismatch(
                "It is not possible for an entity that does not require sessions to create a \
                 session receiver: the entity has requires_session = false."
                    .into(),
            )
        })?;
        let id = match wanted {
            Some(id) if id.chars().count() > MAX_SESSION_ID_CHARS => {
                return Err(EntityError::SessionIdTooLong(id.into()));
            }
            Some(id) => table.intern(id),
            None => match table.next_free(visible_below) {
                Some(id) => id,
                None => {
                    self.waiting
                        .push_back((consumer, now_ms.saturating_add(timeout_ms)));
                    return Ok(None);
                }
            },
        };
        table.lock(&id, consumer, until_ms)?;
        self.make_ready(consumer);
        Ok(Some((id, until_ms)))
    }

    /// Binds waiting session receivers to sessions that became available, in the order they
    /// came, and gives up on those whose timeout passed.
    pub fn bind_waiting(&mut self, now_ms: i64) -> Vec<(ConsumerId, Binding)> {
        let mut out = Vec::new();
        let until_ms = now_ms.saturating_add(self.rules.lock_duration_ms);
        while let Some(&(consumer, _)) = self.waiting.front() {
            let Some(table) = self.sessions.as_mut() else {
                break;
            };
            let Some(id) = table.next_free(self.visible_below) else {
                break;
            };
            self.waiting.pop_front();
            match table.lock(&id, consumer, until_ms) {
                Ok(()) => {
                    self.make_ready(consumer);
                    out.push((consumer, Ok((id, until_ms))));
                }
                Err(error) => out.push((consumer, Err(error))),
            }
        }
        self.waiting.retain(|&(consumer, gives_up)| {
            let gone = gives_up <= now_ms;
            if gone {
                out.push((consumer, Err(EntityError::NoSessionAvailable)));
            }
            !gone
        });
        out
    }

    /// Extends the lock of session `id` by the lock duration; returns when it ends.
    ///
    /// # Errors
    /// [`EntityError::SessionLockLost`] when nobody holds it.
    pub fn renew_session_lock(&mut self, id: &str, now_ms: i64) -> Result<i64, EntityError> {
        let until_ms = now_ms.saturating_add(self.rules.lock_duration_ms);
        self.locked_sessions(id)?.renew(id, until_ms)?;
        Ok(until_ms)
    }

    /// The receiver holding session `id`, if one does.
    pub fn session_holder(&self, id: &str) -> Option<ConsumerId> {
        Some(self.sessions.as_ref()?.lock_of(id)?.holder)
    }

    /// The state of session `id`.
    ///
    /// # Errors
    /// [`EntityError::SessionLockLost`] unless a receiver holds the session.
    pub fn session_state(&mut self, id: &str) -> Result<Option<Bytes>, EntityError> {
        Ok(self.locked_sessions(id)?.state(id))
    }

    /// Sets (or with `None` clears) the state of session `id` at `now_ms`, stored with the
    /// messages.
    ///
    /// # Errors
    /// [`EntityError::SessionLockLost`] unless a receiver holds the session.
    pub fn set_session_state(
        &mut self,
        id: &str,
        state: Option<Bytes>,
        now_ms: i64,
    ) -> Result<(), EntityError> {
        let table = self.locked_sessions(id)?;
        let id = table.intern(id);
        let state = state.map(|state| StoredState {
            state,
            updated_ms: now_ms,
        });
        table.set_state(&id, state.clone());
        self.journal.push(Change::SessionState {
            session: id.to_string(),
            state,
        });
        Ok(())
    }

    /// Up to `top` ids, after the first `skip`, of the sessions with messages or state, or
    /// with `updated_after`, of those whose state was set after that time (ms).
    pub fn session_ids(&self, skip: usize, top: usize, updated_after: Option<i64>) -> Vec<String> {
        self.sessions
            .as_ref()
            .map(|table| table.ids(skip, top, updated_after))
            .unwrap_or_default()
    }

    /// The session receivers whose session lock lapsed since the last call, with their
    /// sessions: their links must go with `session-lock-lost`.
    pub fn take_lapsed(&mut self) -> Vec<(ConsumerId, SessionId)> {
        std::mem::take(&mut self.lapsed)
    }

    /// The lane's sessions, when session `id` is held.
    fn locked_sessions(&mut self, id: &str) -> Result<&mut Sessions, EntityError> {
        let lost = || EntityError::SessionLockLost(id.to_string());
        let table = self.sessions.as_mut().ok_or_else(lost)?;
        table.lock_of(id).ok_or_else(lost)?;
        Ok(table)
    }

    /// Hands each session receiver with demand its session's available messages, in order.
    pub(super) fn dispatch_sessions(&mut self, now_ms: i64) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Some(consumer) = self.ready.pop_front() {
            loop {
                let deliverable = self.has_deliverable_for(consumer);
                let Some(state) = self.consumers.get_mut(&consumer) else {
                    break;
                };
                if !state.can_take() || state.draining || !deliverable {
                    state.ready = false;
                    break;
                }
                let mode = state.mode;
                if let Some(delivery) = self.deliver_next(consumer, mode, now_ms, None) {
                    if let Some(state) = self.consumers.get_mut(&consumer) {
                        state.delivered += 1;
                    }
                    out.push(delivery);
                }
            }
        }
        out
    }

    /// Whether a message can be delivered to `consumer` now.
    pub(super) fn has_deliverable_for(&self, consumer: ConsumerId) -> bool {
        let Some(table) = &self.sessions else {
            return self.has_deliverable();
        };
        table
            .held_by(consumer)
            .and_then(|id| table.first_available(id))
            .is_some_and(|seq| seq < self.visible_below)
    }

    /// Takes the next deliverable message of the session `consumer` holds out of its
    /// session's available ones.
    pub(super) fn next_session_message(&mut self, consumer: ConsumerId) -> Option<i64> {
        let visible_below = self.visible_below;
        let table = self.sessions.as_mut()?;
        let id = table.held_by(consumer)?.clone();
        let seq = table
            .first_available(&id)
            .filter(|seq| *seq < visible_below)?;
        table.make_unavailable(&id, seq);
        Some(seq)
    }

    /// Message `seq` of session `id` is available: its holder, if any, may take it.
    pub(super) fn make_session_message_available(&mut self, id: &str, seq: i64) {
        let Some(table) = self.sessions.as_mut() else {
            return;
        };
        table.make_available(id, seq);
        if let Some(lock) = table.lock_of(id) {
            self.make_ready(lock.holder);
        }
    }

    /// Messages became durable: every session receiver may have something to take.
    pub(super) fn wake_session_receivers(&mut self) {
        let holders: Vec<ConsumerId> = self
            .consumers
            .keys()
            .copied()
            .filter(|consumer| self.has_deliverable_for(*consumer))
            .collect();
        for consumer in holders {
            self.make_ready(consumer);
        }
    }

    /// The lock of the session message `seq` belongs to, while it is held.
    pub(super) fn session_lock_of(&self, seq: i64) -> Option<SessionLock> {
        let table = self.sessions.as_ref()?;
        table.lock_of(self.messages.get(&seq)?.session.as_deref()?)
    }

    /// Frees the session `consumer` holds; its messages' locks go, each counting a delivery.
    pub(super) fn end_session(&mut self, consumer: ConsumerId) {
        let Some(id) = self
            .sessions
            .as_mut()
            .and_then(|table| table.unlock(consumer))
        else {
            return;
        };
        let locked: Vec<i64> = self
            .sessions
            .iter()
            .flat_map(|table| table.messages(&id))
            .filter(|seq| self.messages.get(seq).is_some_and(|e| e.lock.is_some()))
            .collect();
        for seq in locked {
            self.unlock(seq, true);
        }
    }

    /// Ends the session locks that ran out by `now_ms`; their receivers are told and go.
    pub(super) fn end_lapsed_sessions(&mut self, now_ms: i64) {
        let lapsed = match &self.sessions {
            Some(table) => table.lapsed(now_ms),
            None => return,
        };
        for consumer in lapsed {
            let id = self
                .sessions
                .as_ref()
                .and_then(|table| table.held_by(consumer).cloned());
            self.unsubscribe(consumer);
            if let Some(id) = id {
                self.lapsed.push((consumer, id));
            }
        }
    }

    /// Why a settlement by `consumer` found no lock: its message lock, or in a lane with
    /// sessions its session lock, is gone.
    pub(super) fn lock_lost(&self, consumer: ConsumerId) -> EntityError {
        match &self.sessions {
            None => EntityError::LockLost,
            Some(table) => EntityError::SessionLockLost(
                table
                    .held_by(consumer)
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ),
        }
    }
}
