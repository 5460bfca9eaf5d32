//! When an entity's answers may leave (design.md D2, D4): the group commit between the entity's
//! turns and its log.
//!
//! Each turn's changes are staged in the log; answers wait until what they acknowledge is
//! durable as the entity's durability mode says. In `sync` mode they wait in `unflushed` until
//! a flush is requested, then in a [`Flushing`] until that flush completes; meanwhile the next
//! turns are applied and written, so one fsync covers everything that arrived while the previous
//! one ran. A storage failure poisons the entity: from then on nothing is acknowledged.

use tokio::sync::oneshot;

use crate::entity::core::EntityCore;
use crate::entity::handle::{EntityError, EntityEvent, EventSink};
use crate::store::{Flusher, Log, StoreError};

/// How long a `sync` entity lets changes that no answer waits for (a settlement the client
/// settled itself, an expired lock or message) wait for a flush another change asks for,
/// before it asks for one of its own. A window-1 sender's next message then needs one flush,
/// not one behind its receiver's completion.
pub const QUIET_FLUSH_MS: i64 = 5;

/// When an entity's answers may leave.
#[derive(Debug, Clone)]
pub enum Commit {
    /// Right after the write (`memory` mode, and `interval` mode with its periodic flusher,
    /// whose failure poisons the entity too).
    AfterWrite(Option<Flusher>),
    /// After a flush covered the write (`sync` mode).
    AfterFlush(Flusher),
}

/// An answer held back until its changes are durable.
type HeldReply = (EventSink, EntityEvent);

/// What a flush ends with.
pub type FlushResult = Result<(), StoreError>;

/// A flush in flight and what waits for it.
pub struct Flushing {
    done: oneshot::Receiver<FlushResult>,
    /// Answers to send once it completes.
    answers: Vec<HeldReply>,
    /// Messages numbered below this become deliverable once it completes.
    covers_next_seq: i64,
    /// Transfers numbered below this become movable once it completes.
    covers_next_transfer: i64,
}

impl Flushing {
    /// The flush's result, once it completes.
    ///
    /// # Cancel safety
    /// Cancel safe: the receiver stays in place until it yields.
    pub async fn done(&mut self) -> FlushResult {
        (&mut self.done)
            .await
            .unwrap_or_else(|_| Err(StoreError::Sled("the flusher has stopped".into())))
    }
}

/// The result of the flush in flight, if any (never ready without one).
///
/// # Cancel safety
/// Cancel safe, as [`Flushing::done`].
pub async fn wait_flush(flushing: &mut Option<Flushing>) -> FlushResult {
    match flushing {
        Some(pending) => pending.done().await,
        None => std::future::pending().await,
    }
}

/// One entity's group commit: its answers on their way out, and whether storage failed.
pub struct GroupCommit {
    commit: Commit,
    /// Whether it answers without waiting for the flush `sync` mode waits for
    /// (`EnableExpress`); its messages are still delivered only once flushed.
    express: bool,
    /// Set by the first storage failure; from then on nothing is acknowledged.
    poisoned: Option<String>,
    /// Answers of the turn being applied.
    answers: Vec<HeldReply>,
    /// Answers of the turn that no client waits for (settlements the client settled itself:
    /// only a later detach's barrier counts them), so they ask for no flush of their own (see
    /// [`QUIET_FLUSH_MS`]).
    quiet_answers: Vec<HeldReply>,
    /// Whether `unflushed` holds an answer a client waits for.
    unflushed_awaited: bool,
    /// Answers whose changes are written but not yet covered by a requested flush.
    unflushed: Vec<HeldReply>,
    /// Messages numbered below this are covered by a requested flush (the flush metrics
    /// count the others).
    flush_asked_below: i64,
    /// Since when changes that no answer waits for are staged without a flush asked for them
    /// (see [`QUIET_FLUSH_MS`]).
    quiet_since_ms: Option<i64>,
}

impl GroupCommit {
    /// The group commit of an entity whose next message is numbered `next_seq`.
    pub fn new(commit: Commit, express: bool, next_seq: i64) -> Self {
        GroupCommit {
            commit,
            express,
            poisoned: None,
            answers: Vec::new(),
            quiet_answers: Vec::new(),
            unflushed_awaited: false,
            unflushed: Vec::new(),
            flush_asked_below: next_seq,
            quiet_since_ms: None,
        }
    }

    /// Applies a changed `EnableExpress`.
    pub fn set_express(&mut self, express: bool) {
        self.express = express;
    }

    /// Whether storage failed.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Refuses work once storage failed (its durability would be unknown).
    ///
    /// # Errors
    /// [`EntityError::Storage`] with the first failure.
    pub fn check_healthy(&self) -> Result<(), EntityError> {
        match &self.poisoned {
            Some(error) => Err(EntityError::Storage(error.clone())),
            None => Ok(()),
        }
    }

    /// Holds an answer a client waits for until the turn's changes are durable.
    pub fn answer(&mut self, sink: EventSink, event: EntityEvent) {
        self.answers.push((sink, event));
    }

    /// Holds an answer no client waits for until the turn's changes are durable; it asks for
    /// no flush of its own.
    pub fn answer_quietly(&mut self, sink: EventSink, event: EntityEvent) {
        self.quiet_answers.push((sink, event));
    }

    /// When changes nobody waits for will ask for a flush of their own, if they wait.
    pub fn quiet_flush_at(&self) -> Option<i64> {
        self.quiet_since_ms.map(|since| since + QUIET_FLUSH_MS)
    }

    /// Stages the core's changes in the log; `sync` entities write them just before asking
    /// for a flush, the others at once. With `atomic` the write that takes these changes is
    /// one atomic batch (a committed transaction: a crash keeps all of it or none). A failure
    /// poisons the entity.
    pub fn persist(&mut self, log: &mut impl Log, core: &mut EntityCore, atomic: bool) {
        let (changes, moves) = core.take_changes();
        if changes.is_empty() || self.poisoned.is_some() {
            return;
        }
        log.stage(changes, moves || atomic);
        if !matches!(self.commit, Commit::AfterFlush(_)) {
            self.commit_log(log);
        }
    }

    /// [`GroupCommit::persist`]; without a flush to wait for, what is written may be
    /// delivered.
    pub fn persist_and_reveal(&mut self, log: &mut impl Log, core: &mut EntityCore) {
        self.persist(log, core, false);
        if let (Commit::AfterWrite(_), None) = (&self.commit, &self.poisoned) {
            core.reveal_up_to(core.next_seq());
            core.reveal_transfers_up_to(core.next_transfer());
        }
    }

    /// Writes what the log has staged. A failure poisons the entity.
    pub fn commit_log(&mut self, log: &mut impl Log) {
        if self.poisoned.is_some() {
            return;
        }
        if let Err(error) = log.commit() {
            self.poison(&error);
        }
    }

    /// Records a storage failure: from now on nothing is acknowledged.
    pub fn poison(&mut self, error: &impl std::fmt::Display) {
        if self.poisoned.is_none() {
            crate::metrics::broker().storage_errors.inc();
            tracing::error!(%error, "storage failed: the entity stops acknowledging");
            self.poisoned = Some(error.to_string());
        }
    }

    /// Sends the turn's answers now, or parks them for the next flush.
    pub fn release_answers(&mut self) {
        if let Commit::AfterWrite(Some(flusher)) = &self.commit {
            if let Some(error) = flusher.poisoned().cloned() {
                self.poison(&error);
            }
        }
        let answers = std::mem::take(&mut self.answers);
        let quiet = std::mem::take(&mut self.quiet_answers);
        match (&self.commit, &self.poisoned) {
            // An express entity answers now; its write and flush follow all the same.
            (Commit::AfterFlush(_), None) if !self.express => {
                self.unflushed_awaited |= !answers.is_empty();
                self.unflushed.extend(answers);
                self.unflushed.extend(quiet);
            }
            _ => {
                let unflushed = std::mem::take(&mut self.unflushed);
                self.unflushed_awaited = false;
                for (sink, event) in unflushed.into_iter().chain(answers).chain(quiet) {
                    self.send_answer(sink, event);
                }
            }
        }
    }

    /// Whether a `sync` entity with no flush in flight asks for one now: an answer or a
    /// message waits for it, or changes nobody waits for have waited [`QUIET_FLUSH_MS`] (until
    /// then they go with the next flush another change asks for).
    pub fn flush_due(&mut self, now: i64, log: &impl Log, core: &EntityCore) -> bool {
        if !matches!(self.commit, Commit::AfterFlush(_)) {
            return false;
        }
        let waited_for = self.unflushed_awaited || core.has_unrevealed();
        let quiet = log.has_staged() || !self.unflushed.is_empty();
        if waited_for || !quiet {
            self.quiet_since_ms = None;
            return waited_for;
        }
        let since = *self.quiet_since_ms.get_or_insert(now);
        let due = now >= since + QUIET_FLUSH_MS;
        if due {
            self.quiet_since_ms = None;
        }
        due
    }

    /// Asks for a flush covering what is written; the answers waiting for it go with the
    /// request. A poisoned entity answers them now, as errors, instead.
    pub fn request_flush(&mut self, core: &EntityCore) -> Option<Flushing> {
        match (&self.commit, &self.poisoned) {
            (Commit::AfterFlush(flusher), None) => {
                let covers_next_seq = core.next_seq();
                let messages = covers_next_seq.saturating_sub(self.flush_asked_below);
                self.flush_asked_below = covers_next_seq;
                self.unflushed_awaited = false;
                Some(Flushing {
                    done: flusher.request(u64::try_from(messages).unwrap_or(0)),
                    answers: std::mem::take(&mut self.unflushed),
                    covers_next_seq,
                    covers_next_transfer: core.next_transfer(),
                })
            }
            _ => {
                self.release_answers();
                None
            }
        }
    }

    /// A flush completed: what it covers may be delivered, and its answers leave (as errors
    /// if it failed).
    pub fn on_flushed(&mut self, result: FlushResult, flushed: Flushing, core: &mut EntityCore) {
        match result {
            Ok(()) => {
                core.reveal_up_to(flushed.covers_next_seq);
                core.reveal_transfers_up_to(flushed.covers_next_transfer);
            }
            Err(error) => self.poison(&error),
        }
        for (sink, event) in flushed.answers {
            self.send_answer(sink, event);
        }
    }

    /// Waits for the flush in flight, if any, and sends its answers (the entity stops).
    pub async fn complete_flush(&mut self, flushing: Option<Flushing>, core: &mut EntityCore) {
        if let Some(mut pending) = flushing {
            let result = pending.done().await;
            self.on_flushed(result, pending, core);
        }
    }

    /// Sends the answers no flush was asked for yet (the entity is deleted: what they
    /// acknowledge is gone with it).
    pub fn answer_unflushed(&mut self) {
        self.unflushed_awaited = false;
        for (sink, event) in std::mem::take(&mut self.unflushed) {
            self.send_answer(sink, event);
        }
    }

    /// Sends one answer; once poisoned, successes become storage errors (their durability
    /// is unknown).
    fn send_answer(&self, sink: EventSink, event: EntityEvent) {
        let event = match (&self.poisoned, event) {
            (Some(error), EntityEvent::Sent { results }) => EntityEvent::Sent {
                results: results
                    .into_iter()
                    .map(|(ticket, _)| (ticket, Err(EntityError::Storage(error.clone()))))
                    .collect(),
            },
            (Some(error), EntityEvent::Settled { ticket, results }) => EntityEvent::Settled {
                ticket,
                results: results
                    .into_iter()
                    .map(|_| Err(EntityError::Storage(error.clone())))
                    .collect(),
            },
            (_, event) => event,
        };
        let _ = sink.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::handle::Ticket;
    use crate::entity::setup;
    use crate::store::EntityLog;
    use tokio::sync::mpsc;

    /// A queue's core and log in a `sync` store, and the store's directory.
    fn queue() -> (EntityCore, EntityLog, tempfile::TempDir) {
        let (parts, dir) = setup::sync_queue(|_| {});
        (parts.core, parts.log, dir)
    }

    /// A send's answer, and where it arrives.
    fn sent() -> (EventSink, EntityEvent, mpsc::UnboundedReceiver<EntityEvent>) {
        let (sink, answers) = mpsc::unbounded_channel();
        let ticket = Ticket {
            link: 1,
            request: 1,
        };
        let event = EntityEvent::Sent {
            results: vec![(ticket, Ok(()))],
        };
        (sink, event, answers)
    }

    #[test]
    fn an_express_entity_answers_at_once_and_another_after_the_flush() {
        let (mut core, log, _dir) = queue();
        for express in [true, false] {
            let mut commit = GroupCommit::new(Commit::AfterFlush(Flusher::stalled()), express, 1);
            let (sink, event, mut answers) = sent();
            commit.answer(sink, event);
            commit.release_answers();
            assert_eq!(answers.try_recv().is_ok(), express, "express {express}");
            assert_eq!(commit.flush_due(0, &log, &core), !express, "flush due");
            let flushing = commit.request_flush(&core).expect("a sync entity flushes");
            commit.on_flushed(Ok(()), flushing, &mut core);
            assert_eq!(
                answers.try_recv().is_ok(),
                !express,
                "answered after the flush"
            );
        }
    }

    #[test]
    fn an_answer_nobody_waits_for_asks_for_a_flush_only_after_the_quiet_wait() {
        let (core, log, _dir) = queue();
        let mut commit = GroupCommit::new(Commit::AfterFlush(Flusher::stalled()), false, 1);
        let (sink, event, _answers) = sent();
        commit.answer_quietly(sink, event);
        commit.release_answers();
        assert!(!commit.flush_due(100, &log, &core), "not at once");
        assert_eq!(commit.quiet_flush_at(), Some(100 + QUIET_FLUSH_MS));
        assert!(!commit.flush_due(100 + QUIET_FLUSH_MS - 1, &log, &core));
        assert!(
            commit.flush_due(100 + QUIET_FLUSH_MS, &log, &core),
            "after the wait"
        );
        assert_eq!(commit.quiet_flush_at(), None);
    }

    #[test]
    fn a_poisoned_entity_answers_successes_as_storage_errors() {
        let (core, _log, _dir) = queue();
        for commit in [
            Commit::AfterWrite(None),
            Commit::AfterFlush(Flusher::stalled()),
        ] {
            let mut commit = GroupCommit::new(commit, false, 1);
            assert!(commit.check_healthy().is_ok());
            let (sink, event, mut answers) = sent();
            commit.answer(sink, event);
            commit.poison(&StoreError::Sled("disk gone".into()));
            assert!(commit.is_poisoned());
            assert!(matches!(
                commit.check_healthy(),
                Err(EntityError::Storage(_))
            ));
            commit.release_answers();
            assert!(
                commit.request_flush(&core).is_none(),
                "no flush once poisoned"
            );
            let Ok(EntityEvent::Sent { results }) = answers.try_recv() else {
                panic!("answered at once");
            };
            assert!(
                matches!(results[..], [(_, Err(EntityError::Storage(_)))]),
                "{results:?}"
            );
        }
    }
}
