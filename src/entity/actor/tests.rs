//! The actor as a task: when its answers leave, and which settlements ask for a flush.

use super::*;
use crate::entity::commit::QUIET_FLUSH_MS;
use crate::entity::handle::Ticket;
use crate::entity::setup;
use crate::message::Arrival;
use crate::store::Flusher;
use bytes::Bytes;

/// A `sync`-mode queue (express or not) whose flushes `commit` performs; its handle, the
/// shutdown that stops it and its data directory.
fn sync_queue(
    express: bool,
    commit: Commit,
) -> (EntityHandle, CancellationToken, tempfile::TempDir) {
    let (parts, dir) = setup::sync_queue(|queue| queue.enable_express = express);
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let resolve: Resolver = Arc::new(|_| None);
    let handle = spawn(parts, commit, shutdown.clone(), &tracker, resolve);
    (handle, shutdown, dir)
}

/// A one-byte message, as a client sends it.
fn arrival() -> Arrival {
    Arrival::bare(Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']))
}

/// Returns once every turn that began before the call has ended: two markers through the
/// mailbox, the second posted once the first is answered, so in a later turn.
async fn turns_ended(handle: &EntityHandle) {
    for _ in 0..2 {
        let (reply, described) = oneshot::channel();
        handle
            .post(Command::Describe { reply })
            .await
            .expect("posted");
        described.await.expect("described");
    }
}

/// Sends one message to a `sync`-mode queue whose flushes never complete; whether its
/// answer came (it is never refused).
async fn answered_before_the_flush(express: bool) -> bool {
    let (handle, shutdown, _dir) = sync_queue(express, Commit::AfterFlush(Flusher::stalled()));
    let (events, mut answers) = mpsc::unbounded_channel();
    let ticket = Ticket {
        link: 1,
        request: 1,
    };
    let send = Command::send(vec![arrival()], Some(ticket), events);
    handle.post(send).await.expect("posted");
    turns_ended(&handle).await;
    let answered = matches!(
        answers.try_recv(),
        Ok(EntityEvent::Sent { results }) if results == [(ticket, Ok(()))]
    );
    shutdown.cancel();
    answered
}

#[tokio::test]
async fn an_express_queue_answers_before_the_flush_and_another_waits_for_it() {
    assert!(answered_before_the_flush(true).await, "express: answered");
    assert!(
        !answered_before_the_flush(false).await,
        "not express: waits for the flush"
    );
}

/// A settlement the client settled itself asks for no flush of its own: it goes with the
/// next one another change asks for, or after [`QUIET_FLUSH_MS`]; one the client waits
/// for asks at once. Either is answered only once its flush completed.
#[tokio::test]
async fn only_a_settlement_a_client_waits_for_asks_for_a_flush_at_once() {
    let (flusher, mut requests) = Flusher::answered_by_test();
    let (handle, shutdown, _dir) = sync_queue(false, Commit::AfterFlush(flusher));
    for _ in 0..2 {
        let unanswered = mpsc::unbounded_channel().0;
        let send = Command::send(vec![arrival()], None, unanswered);
        handle.post(send).await.expect("posted");
    }
    let (done, _) = requests
        .recv()
        .await
        .expect("a new message asks for a flush");
    done.send(Ok(())).expect("the queue waits");
    let (events, mut received) = mpsc::unbounded_channel();
    let consumer = ConsumerId::at(7, 0);
    let add = Command::peek_lock_consumer(consumer, events);
    handle.post(add).await.expect("added");
    let credit = Command::Credit { consumer, limit: 2 };
    handle.post(credit).await.expect("credit");
    let mut locks = Vec::new();
    while locks.len() < 2 {
        if let Some(EntityEvent::Delivered(run)) = received.recv().await {
            for delivery in run {
                let token = delivery.lock_token.expect("locked");
                locks.push(LockRef {
                    seq: delivery.seq,
                    token,
                });
            }
        }
    }
    for (request, (lock, awaited)) in locks.into_iter().zip([false, true]).enumerate() {
        let ticket = Ticket {
            link: 7,
            request: request as u64,
        };
        let (events, mut answers) = mpsc::unbounded_channel();
        let settle = Command::Settle {
            consumer,
            items: vec![(lock, Settlement::Complete)],
            reply: Some((ticket, events)),
            awaited,
        };
        let posted = Instant::now();
        handle.post(settle).await.expect("posted");
        let (done, _) = if awaited {
            turns_ended(&handle).await;
            requests
                .try_recv()
                .expect("asked within the settlement's turn")
        } else {
            let asked = tokio::time::timeout(Duration::from_secs(10), requests.recv())
                .await
                .expect("asked after a short while")
                .expect("the queue runs");
            // A lower bound only, so a slow machine cannot fail it (the clock counts whole
            // milliseconds, hence one less).
            let quiet = Duration::from_millis(QUIET_FLUSH_MS.unsigned_abs() - 1);
            assert!(posted.elapsed() >= quiet, "asked only after the quiet wait");
            asked
        };
        assert!(answers.try_recv().is_err(), "answered only after its flush");
        done.send(Ok(())).expect("the queue waits");
        let answer = answers.recv().await.expect("answered");
        assert!(
            matches!(answer, EntityEvent::Settled { ref results, .. } if results == &[Ok(())]),
            "{answer:?}"
        );
    }
    shutdown.cancel();
}

/// What the queue tells the administration API.
async fn described(handle: &EntityHandle) -> EntityStats {
    let (reply, described) = oneshot::channel();
    let describe = Command::Describe { reply };
    handle.post(describe).await.expect("posted");
    described.await.expect("described")
}

/// A queue is accessed (Service Bus's `AccessedAt`) only once a client uses it: not at its
/// start, nor when a receiver attaches; a send is a use.
#[tokio::test]
async fn a_queue_is_accessed_only_once_a_client_uses_it() {
    let (handle, shutdown, _dir) = sync_queue(false, Commit::AfterWrite(None));
    let (events, _received) = mpsc::unbounded_channel();
    let consumer = ConsumerId::at(7, 0);
    let add = Command::peek_lock_consumer(consumer, events);
    handle.post(add).await.expect("added");
    assert_eq!(described(&handle).await.accessed_ms, None, "not used yet");
    let before = now_ms();
    let unanswered = mpsc::unbounded_channel().0;
    let send = Command::send(vec![arrival()], None, unanswered);
    handle.post(send).await.expect("posted");
    let accessed = described(&handle).await.accessed_ms.expect("sent to");
    assert!(accessed >= before, "{accessed} >= {before}");
    shutdown.cancel();
}
