//! A partitioned entity's router (design.md D9), behind [`EntityHandle::post`]: which partition
//! takes a command, and how the answers of several partitions become the one answer the caller
//! waits for.
//!
//! A partition is an actor like any unpartitioned entity's; nothing below this module knows
//! partitions exist. A send goes to the partition its session id hashes to, else its partition
//! key's, else (with duplicate detection) its message id's, else to the partitions in turn. A
//! command about a consumer goes to the partition the consumer id names, one about a message
//! to the partition its sequence number or lock token names, one about a session to its
//! session's; the rest go to every partition and their answers are merged.

use tokio::sync::{mpsc, oneshot};

use crate::entity::handle::{
    managed, management, Command, ConsumerId, EntityError, EntityEvent, EntityHandle, EntityStats,
    EventSink, LockRef, Sending, Settlement, Ticket, Work,
};
use crate::entity::operation::{Answer, Operation, MAX_PEEK_BYTES};
use crate::entity::partition;
use crate::entity::queue::LaneActivity;

impl EntityHandle {
    /// Posts a command, waiting for mailbox room (backpressure).
    ///
    /// # Errors
    /// The command back when the actor has stopped (the entity was deleted, or the broker is
    /// stopping).
    ///
    /// # Cancel safety
    /// Not cancel safe: a cancelled call may or may not have posted the command.
    pub async fn post(&self, command: Command) -> Result<(), Box<Command>> {
        match self.is_partitioned() {
            false => self.post_to(0, command).await,
            true => post(self, command).await,
        }
    }

    /// Posts a background tick's command if the mailbox has room; a tick that finds it full
    /// skips this entity until the next tick. A partitioned entity's router takes it (and
    /// waits for its partitions' mailboxes) on a task of its own.
    ///
    /// # Errors
    /// The command back when the mailbox is full or the actor has stopped.
    pub fn try_post(&self, command: Command) -> Result<(), Box<Command>> {
        if self.is_partitioned() {
            let handle = self.clone();
            tokio::spawn(async move {
                if let Err(command) = post(&handle, command).await {
                    command.refuse(&handle.refusal());
                }
            });
            return Ok(());
        }
        self.try_post_to(0, command)
    }
}

/// Routes a command to the partitions of `handle` that take it.
///
/// # Errors
/// The command back when the partition it goes to has stopped (a command for several
/// partitions is answered with the refusal instead).
pub async fn post(handle: &EntityHandle, command: Command) -> Result<(), Box<Command>> {
    let count = handle.partitions();
    match command {
        Command::Send { transfers, events } => {
            send(handle, transfers, events).await;
            Ok(())
        }
        Command::AddConsumer { consumer, .. }
        | Command::Credit { consumer, .. }
        | Command::Drain { consumer }
        | Command::Forwarded { consumer, .. }
        | Command::RemoveConsumer { consumer } => {
            handle.post_to(consumer.partition(), command).await
        }
        Command::GiveBack { ref delivery } => {
            let partition = delivery.consumer.partition();
            handle.post_to(partition, command).await
        }
        Command::Settle {
            consumer,
            items,
            reply,
            awaited,
        } => {
            settle(handle, consumer, items, reply, |consumer, items, reply| {
                Command::Settle {
                    consumer,
                    items,
                    reply,
                    awaited,
                }
            })
            .await;
            Ok(())
        }
        Command::Stage { txn, work, reply } => {
            stage(handle, txn, work, reply).await;
            Ok(())
        }
        Command::Discharge { txn, commit, reply } => {
            let parts = (0..count)
                .map(|partition| (partition, txn))
                .collect::<Vec<_>>();
            scatter(handle, parts, reply, |txn, reply| Command::Discharge {
                txn,
                commit,
                reply,
            })
            .await;
            Ok(())
        }
        Command::Manage {
            lane,
            operation,
            reply,
        } => {
            manage(handle, lane, *operation, reply).await;
            Ok(())
        }
        Command::ExpireDue { now_ms } => {
            for partition in 0..count {
                let _ = handle
                    .post_to(partition, Command::ExpireDue { now_ms })
                    .await;
            }
            Ok(())
        }
        Command::ReapIfIdle { reply } => {
            let handle = handle.clone();
            tokio::spawn(async move {
                let _ = reply.send(reap_if_idle(&handle).await);
            });
            Ok(())
        }
        Command::Delete { reply } => {
            reply_every(handle, |reply| Command::Delete { reply }, reply).await;
            Ok(())
        }
        Command::AddSubscription {
            config,
            number: _,
            reply,
        } => {
            let handle = handle.clone();
            tokio::spawn(async move {
                let _ = reply.send(add_subscription(&handle, *config).await);
            });
            Ok(())
        }
        Command::RemoveSubscription { name, reply } => {
            let answers = ask_all(handle, |reply| Command::RemoveSubscription {
                name: name.clone(),
                reply,
            })
            .await;
            tokio::spawn(async move {
                let _ = reply.send(first_error(answers).await);
            });
            Ok(())
        }
        Command::Reconfigure { settings, reply } => {
            handle.routing_set(&settings);
            let answers = ask_all(handle, |reply| Command::Reconfigure {
                settings: settings.clone(),
                reply,
            })
            .await;
            tokio::spawn(async move {
                for answer in answers {
                    let _ = answer.await;
                }
                let _ = reply.send(());
            });
            Ok(())
        }
        Command::Tick { reply } => {
            reply_every(handle, |reply| Command::Tick { reply }, reply).await;
            Ok(())
        }
        Command::IsIdle { reply } => {
            reply_every(handle, |reply| Command::IsIdle { reply }, reply).await;
            Ok(())
        }
        Command::Describe { reply } => {
            let answers = ask_all(handle, |reply| Command::Describe { reply }).await;
            tokio::spawn(async move {
                let mut stats = Vec::with_capacity(answers.len());
                for answer in answers {
                    stats.extend(answer.await.ok());
                }
                let _ = reply.send(merge_stats(stats));
            });
            Ok(())
        }
    }
}

/// Posts to every partition the command `make` builds around a fresh answer channel; the
/// answers, in partition order (a partition that stopped drops its channel unanswered).
async fn ask_all<T>(
    handle: &EntityHandle,
    make: impl Fn(oneshot::Sender<T>) -> Command,
) -> Vec<oneshot::Receiver<T>> {
    let mut answers = Vec::with_capacity(handle.partitions());
    for partition in 0..handle.partitions() {
        let (reply, answer) = oneshot::channel();
        // A partition that stopped drops the command, and with it the channel.
        let _ = handle.post_to(partition, make(reply)).await;
        answers.push(answer);
    }
    answers
}

/// The first refusal among subscription changes, or `Ok`.
async fn first_error(answers: Vec<oneshot::Receiver<Result<(), String>>>) -> Result<(), String> {
    let mut result = Ok(());
    for answer in answers {
        let answer = answer
            .await
            .unwrap_or_else(|_| Err("the topic is not available".to_owned()));
        if result.is_ok() {
            result = answer;
        }
    }
    result
}

/// Adds a subscription to every partition of a topic under the lane number its first
/// partition gives it, so that one number names it everywhere.
async fn add_subscription(
    handle: &EntityHandle,
    config: crate::config::SubscriptionConfig,
) -> Result<(), String> {
    let (reply, first) = oneshot::channel();
    let command = Command::AddSubscription {
        config: Box::new(config.clone()),
        number: None,
        reply,
    };
    let unavailable = || "the topic is not available".to_owned();
    handle
        .post_to(0, command)
        .await
        .map_err(|_| unavailable())?;
    first.await.map_err(|_| unavailable())??;
    let number = handle.subscription(&config.name).ok_or_else(unavailable)?;
    let mut answers = Vec::new();
    for partition in 1..handle.partitions() {
        let (reply, answer) = oneshot::channel();
        let command = Command::AddSubscription {
            config: Box::new(config.clone()),
            number: Some(number),
            reply,
        };
        let _ = handle.post_to(partition, command).await;
        answers.push(answer);
    }
    first_error(answers).await
}

/// Deletes the entity when every partition has been idle for its `auto_delete_on_idle` time;
/// answers whether it did.
async fn reap_if_idle(handle: &EntityHandle) -> bool {
    if handle.routing_auto_delete_ms().is_none() {
        return false;
    }
    every(ask_all(handle, |reply| Command::IsIdle { reply }).await).await
        && every(ask_all(handle, |reply| Command::Delete { reply }).await).await
}

/// Whether every partition answered `true` (one that stopped answers `false`).
async fn every(answers: Vec<oneshot::Receiver<bool>>) -> bool {
    let mut all = true;
    for answer in answers {
        all &= answer.await.unwrap_or(false);
    }
    all
}

/// Asks every partition what `make` asks and answers `reply` whether all said yes.
async fn reply_every(
    handle: &EntityHandle,
    make: impl Fn(oneshot::Sender<bool>) -> Command,
    reply: oneshot::Sender<bool>,
) {
    let answers = ask_all(handle, make).await;
    tokio::spawn(async move {
        let _ = reply.send(every(answers).await);
    });
}

/// The counts of every partition added up; the activity, too; when it was last used, the
/// latest; the filters, the first partition's (every partition has the same rules).
fn merge_stats(all: Vec<EntityStats>) -> EntityStats {
    let mut merged = EntityStats::default();
    for (index, stats) in all.into_iter().enumerate() {
        for (lane, counts) in stats.lanes {
            match merged.lanes.iter_mut().find(|(id, _)| *id == lane) {
                Some((_, total)) => {
                    total.active += counts.active;
                    total.deferred += counts.deferred;
                    total.scheduled += counts.scheduled;
                    total.bytes += counts.bytes;
                }
                None => merged.lanes.push((lane, counts)),
            }
        }
        for (lane, activity) in stats.activity {
            match merged.activity.iter_mut().find(|(id, _)| *id == lane) {
                Some((_, total)) => add_activity(total, activity),
                None => merged.activity.push((lane, activity)),
            }
        }
        merged.sent += stats.sent;
        merged.duplicates_dropped += stats.duplicates_dropped;
        merged.duplicate_ids += stats.duplicate_ids;
        if index == 0 {
            merged.filters = stats.filters;
        }
        merged.accessed_ms = merged.accessed_ms.max(stats.accessed_ms);
    }
    merged
}

/// Adds one partition's activity in a lane to the total.
fn add_activity(total: &mut LaneActivity, more: LaneActivity) {
    total.received += more.received;
    total.consumed += more.consumed;
    total.forwarded += more.forwarded;
    total.lock_expirations += more.lock_expirations;
    total.expired += more.expired;
    for (reason, count) in more.dead_lettered {
        match total.dead_lettered.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, total)) => *total += count,
            None => total.dead_lettered.push((reason, count)),
        }
    }
}

/// Settles locks where they are: the items go to the partitions their tokens name, each
/// under the consumer's id at that partition; the results come back in the items' order.
async fn settle(
    handle: &EntityHandle,
    consumer: ConsumerId,
    items: Vec<(LockRef, Settlement)>,
    reply: Option<(Ticket, EventSink)>,
    make: impl Fn(ConsumerId, Vec<(LockRef, Settlement)>, Option<(Ticket, EventSink)>) -> Command,
) {
    let count = handle.partitions();
    let (parts, strays) = split(items, |(lock, _)| partition::of_token(lock.token), count);
    let strays: Vec<usize> = strays.into_iter().map(|(index, _)| index).collect();
    let parts = parts
        .into_iter()
        .map(|(partition, items)| {
            let consumer = ConsumerId::at(consumer.link(), partition);
            (partition, (consumer, items))
        })
        .collect();
    scatter_indexed(handle, parts, strays, reply, |(consumer, items), reply| {
        make(consumer, items, reply)
    })
    .await;
}

/// Routes each transfer of a send to its partition: one command per partition, the transfers
/// in the order they came; a transfer no partition takes is refused on the spot. Each
/// partition answers its own transfers (an answer names their tickets).
async fn send(handle: &EntityHandle, transfers: Vec<Sending>, events: EventSink) {
    let mut parts: Vec<(usize, Vec<Sending>)> = Vec::new();
    let mut refused = Vec::new();
    for sending in transfers {
        match handle.routing_partition_of(&sending.messages) {
            Ok(partition) => match parts.iter_mut().find(|(p, _)| *p == partition) {
                Some((_, part)) => part.push(sending),
                None => parts.push((partition, vec![sending])),
            },
            Err(error) => refused.extend(Sending::refused(vec![sending], &error)),
        }
    }
    if !refused.is_empty() {
        let _ = events.send(EntityEvent::Sent { results: refused });
    }
    for (partition, transfers) in parts {
        let command = Command::Send {
            transfers,
            events: events.clone(),
        };
        if let Err(command) = handle.post_to(partition, command).await {
            command.refuse(&handle.refusal());
        }
    }
}

/// Routes a transaction's work to the partition it concerns.
async fn stage(
    handle: &EntityHandle,
    txn: crate::entity::handle::TxnId,
    work: Work,
    reply: Option<(Ticket, EventSink)>,
) {
    let partition = match &work {
        Work::Send(messages)
        | Work::Transfer { messages, .. }
        | Work::Schedule { messages, .. } => handle.routing_partition_of(messages),
        Work::Settle { consumer, .. } => Ok(consumer.partition()),
        Work::SettleByToken { tokens, .. } => tokens
            .first()
            .map(|token| partition::of_token(*token))
            .filter(|partition| {
                tokens
                    .iter()
                    .all(|token| partition::of_token(*token) == *partition)
            })
            .ok_or(EntityError::LockLost),
    };
    match (work, partition) {
        (
            Work::Settle {
                consumer,
                items,
                client_settled,
            },
            _,
        ) => {
            settle(handle, consumer, items, reply, |consumer, items, reply| {
                Command::Stage {
                    txn,
                    work: Work::Settle {
                        consumer,
                        items,
                        client_settled,
                    },
                    reply,
                }
            })
            .await;
        }
        (work, Ok(partition)) => {
            let command = Command::Stage { txn, work, reply };
            if let Err(command) = handle.post_to(partition, command).await {
                command.refuse(&handle.refusal());
            }
        }
        (work, Err(error)) => Command::Stage { txn, work, reply }.refuse(&error),
    }
}

/// Performs a management operation where it can be: in the partition its sequence numbers,
/// lock tokens or session name, else in every partition, with the answers merged.
async fn manage(
    handle: &EntityHandle,
    lane: crate::entity::handle::LaneId,
    operation: Operation,
    reply: (Ticket, EventSink),
) {
    let count = handle.partitions();
    let one = |partition: usize, operation: Operation| (partition, operation);
    let route = match &operation {
        Operation::Peek {
            session: Some(session),
            ..
        }
        | Operation::ReceiveBySequence {
            session: Some(session),
            ..
        }
        | Operation::BatchDelete {
            session: Some(session),
            ..
        }
        | Operation::RenewSessionLock { session }
        | Operation::GetSessionState { session }
        | Operation::SetSessionState { session, .. } => {
            Some(partition::of_key(session.as_bytes(), count))
        }
        Operation::EnumerateRules { .. } => Some(0),
        Operation::Resubmit { seq } => Some(partition::of_number(*seq)),
        Operation::Schedule { messages } => match handle.routing_partition_of(messages) {
            Ok(partition) => Some(partition),
            Err(error) => return answer(reply, Err(error)),
        },
        _ => None,
    };
    if let Some(partition) = route {
        let (partition, operation) = one(partition, operation);
        if partition >= count {
            let error = not_found(&operation);
            return answer(reply, Err(error));
        }
        let command = Command::Manage {
            lane,
            operation: Box::new(operation),
            reply,
        };
        if let Err(command) = handle.post_to(partition, command).await {
            command.refuse(&handle.refusal());
        }
        return;
    }
    let manage = move |operation: Operation, reply: Option<(Ticket, EventSink)>| Command::Manage {
        lane,
        operation: Box::new(operation),
        reply: reply.expect("management operations are answered"),
    };
    match operation {
        Operation::RenewLock { tokens } => {
            let (parts, strays) = split(tokens, |token| partition::of_token(*token), count);
            let parts = to_operations(parts, |tokens| Operation::RenewLock { tokens });
            let strays = strays.into_iter().map(|(index, _)| index).collect();
            scatter_indexed(handle, parts, strays, Some(reply), manage).await;
        }
        Operation::UpdateDisposition { tokens, settlement } => {
            let (parts, strays) = split(tokens, |token| partition::of_token(*token), count);
            let parts = to_operations(parts, |tokens| Operation::UpdateDisposition {
                tokens,
                settlement: settlement.clone(),
            });
            let strays = strays.into_iter().map(|(index, _)| index).collect();
            scatter_indexed(handle, parts, strays, Some(reply), manage).await;
        }
        Operation::ReceiveBySequence {
            seqs,
            mode,
            session,
        } => {
            let (parts, strays) = split(seqs, |seq| partition::of_number(*seq), count);
            if let Some((_, seq)) = strays.first() {
                return answer(reply, Err(EntityError::MessageNotFound(*seq, "deferred")));
            }
            let parts = to_operations(parts, |seqs| Operation::ReceiveBySequence {
                seqs,
                mode,
                session: session.clone(),
            });
            scatter_indexed(handle, parts, Vec::new(), Some(reply), manage).await;
        }
        Operation::CancelScheduled { seqs } => {
            // Numbers of no partition name no scheduled message: nothing to cancel.
            let (parts, _) = split(seqs, |seq| partition::of_number(*seq), count);
            let parts = to_operations(parts, |seqs| Operation::CancelScheduled { seqs });
            scatter_indexed(handle, parts, Vec::new(), Some(reply), manage).await;
        }
        Operation::Peek {
            from, count: most, ..
        } => {
            let handle = handle.clone();
            tokio::spawn(async move {
                let result = peek(&handle, lane, from, most).await;
                answer(reply, result);
            });
        }
        Operation::BatchDelete {
            count: most,
            before_ms,
            ..
        } => {
            let handle = handle.clone();
            tokio::spawn(async move {
                let result = batch_delete(&handle, lane, most, before_ms).await;
                answer(reply, result);
            });
        }
        Operation::GetMessageSessions {
            skip,
            top,
            updated_after,
        } => {
            let parts = (0..count)
                .map(|partition| {
                    let operation = Operation::GetMessageSessions {
                        skip: 0,
                        top: skip.saturating_add(top),
                        updated_after,
                    };
                    (partition, operation)
                })
                .collect();
            // Each partition gives its first `skip + top`: the page is that far into them all.
            let merge = move |answers: Vec<EntityEvent>, ticket| {
                let mut ids = Vec::new();
                for answer in answers {
                    match answer {
                        EntityEvent::Managed {
                            result: Ok(Answer::Sessions { ids: more, .. }),
                            ..
                        } => ids.extend(more),
                        EntityEvent::Managed { result, .. } => {
                            return EntityEvent::Managed { ticket, result };
                        }
                        _ => {}
                    }
                }
                let ids = ids.into_iter().skip(skip).take(top).collect();
                let result = Ok(Answer::Sessions { skip, ids });
                EntityEvent::Managed { ticket, result }
            };
            scatter_with(handle, parts, Some(reply), manage, merge).await;
        }
        operation => {
            // Rules and purges: every partition does it.
            let parts = (0..count)
                .map(|partition| (partition, operation.clone()))
                .collect();
            scatter(handle, parts, Some(reply), manage).await;
        }
    }
}

/// The refusal of an operation naming a partition the entity does not have.
fn not_found(operation: &Operation) -> EntityError {
    match operation {
        Operation::Resubmit { seq } => EntityError::MessageNotFound(*seq, "unlocked dead-lettered"),
        _ => EntityError::Unavailable,
    }
}

/// Sends a management answer.
fn answer(reply: (Ticket, EventSink), result: Result<Answer, EntityError>) {
    let (ticket, events) = reply;
    let _ = events.send(EntityEvent::Managed { ticket, result });
}

/// Peeks the partitions in order from the one `from` names, each from `from` on, until
/// `most` messages (or [`MAX_PEEK_BYTES`] of them) are found: ascending sequence numbers.
async fn peek(
    handle: &EntityHandle,
    lane: crate::entity::handle::LaneId,
    from: i64,
    most: usize,
) -> Result<Answer, EntityError> {
    let mut peeked = Vec::new();
    let mut bytes = 0;
    for partition in partition::of_number(from.max(0))..handle.partitions() {
        if peeked.len() >= most || bytes >= MAX_PEEK_BYTES {
            break;
        }
        let operation = Operation::Peek {
            from,
            count: most - peeked.len(),
            session: None,
        };
        if let Answer::Peeked(messages) = ask(handle, partition, lane, operation).await? {
            bytes += messages.iter().map(bytes::Bytes::len).sum::<usize>();
            peeked.extend(messages);
        }
    }
    Ok(Answer::Peeked(peeked))
}

/// Deletes up to `most` messages enqueued before `before_ms`, partition after partition.
async fn batch_delete(
    handle: &EntityHandle,
    lane: crate::entity::handle::LaneId,
    most: usize,
    before_ms: i64,
) -> Result<Answer, EntityError> {
    let mut deleted = 0;
    for partition in 0..handle.partitions() {
        if deleted >= most {
            break;
        }
        let operation = Operation::BatchDelete {
            count: most - deleted,
            before_ms,
            session: None,
        };
        if let Answer::Deleted(count) = ask(handle, partition, lane, operation).await? {
            deleted += count;
        }
    }
    Ok(Answer::Deleted(deleted))
}

/// One partition's answer to a management operation.
async fn ask(
    handle: &EntityHandle,
    partition: usize,
    lane: crate::entity::handle::LaneId,
    operation: Operation,
) -> Result<Answer, EntityError> {
    let (command, events) = management(lane, operation);
    if handle.post_to(partition, command).await.is_err() {
        return Err(handle.refusal());
    }
    managed(events)
        .await
        .unwrap_or_else(|()| Err(handle.refusal()))
}

/// Items by the partition `of` names (below `count`), each with its index among all; and the
/// strays, which name no partition.
#[allow(clippy::type_complexity)]
fn split<T>(
    items: Vec<T>,
    of: impl Fn(&T) -> usize,
    count: usize,
) -> (Vec<(usize, Vec<(usize, T)>)>, Vec<(usize, T)>) {
    let mut parts: Vec<(usize, Vec<(usize, T)>)> = Vec::new();
    let mut strays = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let partition = of(&item);
        if partition >= count {
            strays.push((index, item));
            continue;
        }
        match parts.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, part)) => part.push((index, item)),
            None => parts.push((partition, vec![(index, item)])),
        }
    }
    (parts, strays)
}

/// Split items turned into one operation per partition, each with the indexes of its items.
fn to_operations<T>(
    parts: Vec<(usize, Vec<(usize, T)>)>,
    make: impl Fn(Vec<T>) -> Operation,
) -> Vec<(usize, (Vec<usize>, Operation))> {
    parts
        .into_iter()
        .map(|(partition, items)| {
            let (indexes, items): (Vec<usize>, Vec<T>) = items.into_iter().unzip();
            (partition, (indexes, make(items)))
        })
        .collect()
}

/// A part of a command for one partition, with the indexes of its items among all.
trait Indexed {
    /// Whether the parts are settlements (answered `Settled`; else management operations,
    /// answered `Managed`).
    const SETTLES: bool;
    /// What the part carries, without the indexes.
    type Part;
    /// The part and its indexes.
    fn take(self) -> (Vec<usize>, Self::Part);
}

impl Indexed for (Vec<usize>, Operation) {
    const SETTLES: bool = false;
    type Part = Operation;
    fn take(self) -> (Vec<usize>, Operation) {
        self
    }
}

impl Indexed for (ConsumerId, Vec<(usize, (LockRef, Settlement))>) {
    const SETTLES: bool = true;
    type Part = (ConsumerId, Vec<(LockRef, Settlement)>);
    fn take(self) -> (Vec<usize>, Self::Part) {
        let (consumer, items) = self;
        let (indexes, items): (Vec<usize>, Vec<_>) = items.into_iter().unzip();
        (indexes, (consumer, items))
    }
}

/// Posts one part per partition and merges their answers into the one `reply` wants, each
/// item's result at its index (`strays`, items of no partition, fail as their kind does).
async fn scatter_indexed<P: Indexed>(
    handle: &EntityHandle,
    parts: Vec<(usize, P)>,
    strays: Vec<usize>,
    reply: Option<(Ticket, EventSink)>,
    make: impl Fn(P::Part, Option<(Ticket, EventSink)>) -> Command,
) {
    let settles = P::SETTLES;
    let mut indexes = Vec::with_capacity(parts.len());
    let mut commands = Vec::with_capacity(parts.len());
    for (partition, part) in parts {
        let (items, part) = part.take();
        indexes.push(items);
        commands.push((partition, part));
    }
    let total = indexes.iter().map(Vec::len).sum::<usize>() + strays.len();
    if commands.len() == 1 && strays.is_empty() {
        let (partition, part) = commands.pop().expect("one part");
        if let Err(command) = handle.post_to(partition, make(part, reply)).await {
            command.refuse(&handle.refusal());
        }
        return;
    }
    let merge = move |answers: Vec<EntityEvent>, ticket: Ticket| {
        merge_indexed(answers, &indexes, &strays, total, ticket, settles)
    };
    scatter_with(handle, commands, reply, make, merge).await;
}

/// Posts one part per partition and merges their answers (in partition order) into one.
async fn scatter<T>(
    handle: &EntityHandle,
    parts: Vec<(usize, T)>,
    reply: Option<(Ticket, EventSink)>,
    make: impl Fn(T, Option<(Ticket, EventSink)>) -> Command,
) {
    scatter_with(handle, parts, reply, make, merge_whole).await;
}

/// Posts every part with its own ticket (its index) and, once all answered, sends `reply`
/// what `merge` makes of their answers (in the parts' order).
async fn scatter_with<T>(
    handle: &EntityHandle,
    parts: Vec<(usize, T)>,
    reply: Option<(Ticket, EventSink)>,
    make: impl Fn(T, Option<(Ticket, EventSink)>) -> Command,
    merge: impl FnOnce(Vec<EntityEvent>, Ticket) -> EntityEvent + Send + 'static,
) {
    let (sink, mut events) = mpsc::unbounded_channel();
    let expected = parts.len();
    for (index, (partition, part)) in parts.into_iter().enumerate() {
        let ticket = Ticket {
            link: 0,
            request: index as u64,
        };
        let wanted = reply.is_some().then(|| (ticket, sink.clone()));
        if let Err(command) = handle.post_to(partition, make(part, wanted)).await {
            command.refuse(&handle.refusal());
        }
    }
    drop(sink);
    let Some((ticket, caller)) = reply else {
        return;
    };
    tokio::spawn(async move {
        let mut answers: Vec<Option<EntityEvent>> = (0..expected).map(|_| None).collect();
        while let Some(event) = events.recv().await {
            if let Some(slot) = answers.get_mut(ticket_of(&event) as usize) {
                *slot = Some(event);
            }
        }
        let answers: Vec<EntityEvent> = answers.into_iter().flatten().collect();
        let _ = caller.send(merge(answers, ticket));
    });
}

/// The request number of an answer's ticket.
fn ticket_of(event: &EntityEvent) -> u64 {
    match event {
        EntityEvent::Sent { results } => results.first().map_or(u64::MAX, |(t, _)| t.request),
        EntityEvent::Managed { ticket, .. }
        | EntityEvent::Settled { ticket, .. }
        | EntityEvent::Discharged { ticket, .. } => ticket.request,
        _ => u64::MAX,
    }
}

/// Answers whose items are results in order: settlements, lock renewals, deferred messages
/// received, cancellations and dispositions; each item's result at its index.
fn merge_indexed(
    answers: Vec<EntityEvent>,
    indexes: &[Vec<usize>],
    strays: &[usize],
    total: usize,
    ticket: Ticket,
    settles: bool,
) -> EntityEvent {
    let mut settled: Vec<Option<Result<(), EntityError>>> = (0..total).map(|_| None).collect();
    for &stray in strays {
        settled[stray] = Some(Err(EntityError::LockLost));
    }
    let mut renewed: Vec<(usize, i64)> = Vec::new();
    let mut received: Vec<(usize, (uuid::Uuid, bytes::Bytes))> = Vec::new();
    let mut managed_error = None;
    for (answer, indexes) in answers.into_iter().zip(indexes) {
        match answer {
            EntityEvent::Settled { results, .. } => {
                for (result, index) in results.into_iter().zip(indexes) {
                    settled[*index] = Some(result);
                }
            }
            EntityEvent::Managed { result, .. } => match result {
                Ok(Answer::Renewed(expiries)) => {
                    renewed.extend(indexes.iter().copied().zip(expiries));
                }
                Ok(Answer::Received(messages)) => {
                    received.extend(indexes.iter().copied().zip(messages));
                }
                Ok(_) => {}
                Err(error) => {
                    managed_error.get_or_insert(error);
                }
            },
            _ => {}
        }
    }
    if settles {
        let results = settled
            .into_iter()
            .map(|result| result.unwrap_or(Err(EntityError::Unavailable)))
            .collect();
        return EntityEvent::Settled { ticket, results };
    }
    let result = match managed_error {
        Some(error) => Err(error),
        None if !strays.is_empty() => Err(EntityError::LockLost),
        None if !renewed.is_empty() => {
            renewed.sort_by_key(|(index, _)| *index);
            Ok(Answer::Renewed(
                renewed.into_iter().map(|(_, at)| at).collect(),
            ))
        }
        None if !received.is_empty() => {
            received.sort_by_key(|(index, _)| *index);
            Ok(Answer::Received(
                received.into_iter().map(|(_, m)| m).collect(),
            ))
        }
        None => Ok(Answer::Done),
    };
    EntityEvent::Managed { ticket, result }
}

/// Answers that each stand for the whole: the first refusal, else the first partition's
/// answer, with purged messages added up.
fn merge_whole(answers: Vec<EntityEvent>, ticket: Ticket) -> EntityEvent {
    let mut merged: Option<EntityEvent> = None;
    let mut purged = 0;
    for answer in answers {
        if let EntityEvent::Managed {
            result: Ok(Answer::Purged(count)),
            ..
        } = &answer
        {
            purged += count;
        }
        let failed = matches!(
            answer,
            EntityEvent::Managed { result: Err(_), .. }
                | EntityEvent::Discharged { result: Err(_), .. }
        );
        if merged.is_none() || failed && !merged_failed(merged.as_ref()) {
            merged = Some(answer);
        }
    }
    match merged {
        Some(EntityEvent::Managed {
            result: Ok(Answer::Purged(_)),
            ..
        }) => EntityEvent::Managed {
            ticket,
            result: Ok(Answer::Purged(purged)),
        },
        Some(EntityEvent::Managed { result, .. }) => EntityEvent::Managed { ticket, result },
        Some(EntityEvent::Discharged { result, .. }) => EntityEvent::Discharged { ticket, result },
        _ => EntityEvent::Managed {
            ticket,
            result: Err(EntityError::Unavailable),
        },
    }
}

/// Whether a merged answer is a refusal already.
fn merged_failed(merged: Option<&EntityEvent>) -> bool {
    matches!(
        merged,
        Some(
            EntityEvent::Managed { result: Err(_), .. }
                | EntityEvent::Discharged { result: Err(_), .. }
        )
    )
}
