//! Hostile clients, round two (issue 32), on the AMQP side: links the broker refused, handles
//! and delivery tags outside AMQP's bounds, and oversized pre-settled deliveries. Each test
//! prints the broker's peak memory and a bystander's slowest round trip (under a second,
//! asserted); hand-made frames against the real binary.

use bytes::Bytes;
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::Fields;
use fe2o3_amqp::types::definitions::{
    AmqpError, ConnectionError, ErrorCondition, Handle, LinkError, ReceiverSettleMode, Role,
    SenderSettleMode,
};
use fe2o3_amqp::types::messaging::{DeliveryState, FilterSet, Source, Target, TargetArchetype};
use fe2o3_amqp::types::performatives::{Attach, Transfer};
use fe2o3_amqp::types::primitives::{Symbol, Value};

use super::hostile::{config, print_peak, Bystander};
use super::{message, RawClient};
use crate::child::ChildBroker;

/// An attach of a sender link named `name` with `handle` to `address`.
fn sender_attach(name: String, handle: u32, address: &str) -> FrameBody {
    FrameBody::Attach(Attach {
        name,
        handle: Handle(handle),
        role: Role::Sender,
        snd_settle_mode: SenderSettleMode::Mixed,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(Source::builder().address("here").build())),
        target: Some(Box::new(TargetArchetype::Target(
            Target::builder().address(address).build(),
        ))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

/// The first frame of a delivery on `handle`, whole in one frame.
fn transfer(
    handle: u32,
    delivery_id: u32,
    tag: Vec<u8>,
    settled: bool,
    payload: Bytes,
) -> FrameBody {
    FrameBody::Transfer {
        performative: Transfer {
            handle: Handle(handle),
            delivery_id: Some(delivery_id),
            delivery_tag: Some(tag.into()),
            message_format: Some(0),
            settled: Some(settled),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        },
        payload,
    }
}

/// The detach the broker sends for its link `local_handle`; returns its error.
async fn detach_error(
    client: &mut RawClient,
    local_handle: u32,
) -> fe2o3_amqp::types::definitions::Error {
    let detach = client
        .expect(
            "the broker's detach",
            |body| matches!(body, FrameBody::Detach(d) if d.handle == Handle(local_handle)),
        )
        .await;
    let FrameBody::Detach(detach) = detach else {
        unreachable!()
    };
    detach.error.expect("the detach says why")
}

/// Defect 2: links the broker refused count against `max_links_per_connection` until the
/// client detaches them, and keep nothing of their attach: 1,000 refused attaches with 60 KB
/// names held 60 MiB and every one of them, so that an accepted link could still follow.
/// (Names that long are refused for their length now, before the address is looked up.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_links_count_against_the_connection_limit_and_keep_no_name() {
    const NAME_BYTES: usize = 60 * 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config("max_links_per_connection = 256"));
    let bystander = Bystander::start(broker.addr).await;
    let (idle, _) = broker.memory_kib();
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    // One at a time: the refusals echo the names, and a client that does not read them
    // is throttled.
    let mut refused = 0;
    for handle in 0..1000u32 {
        let name = format!("{handle:05}{}", "n".repeat(NAME_BYTES));
        client.send(sender_attach(name, handle, "missing")).await;
        loop {
            let body = client
                .expect("the refusal", |body| {
                    matches!(body, FrameBody::Attach(_) | FrameBody::Detach(_))
                })
                .await;
            if let FrameBody::Detach(detach) = body {
                let error = detach.error.expect("a refusal says why");
                match error.condition {
                    ErrorCondition::AmqpError(AmqpError::InvalidField) => refused += 1,
                    ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded) => {}
                    other => panic!("refused with {other:?}"),
                }
                break;
            }
        }
    }
    let (held, peak) = broker.memory_kib();
    eprintln!("1000 refused attaches of 60 KB names: broker {idle} KiB idle, {held} KiB after (peak {peak} KiB)");
    assert_eq!(
        refused, 256,
        "once 256 refused links are held, the rest are refused for the limit"
    );
    assert!(
        held < idle + 16 * 1024,
        "the refused links hold {} KiB",
        held - idle
    );
    // The 256 held refusals fill the connection: an attach to a queue that exists is refused.
    let name = client.request_sender(1000, "q").await;
    let reply = client.attach_reply(&name).await;
    assert!(reply.target.is_none(), "accepted past the limit: {reply:?}");
    let error = detach_error(&mut client, reply.handle.0).await;
    assert_eq!(
        error.condition,
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded),
        "{error:?}"
    );
    // Detaching one refused link makes room for a link that works.
    client.detach(0).await;
    client.attach_sender(1001, "q").await;
    let sent = client.send_message(1001, message("after", 10)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    print_peak(
        &broker,
        "refused_links_count_against_the_connection_limit_and_keep_no_name",
    );
    bystander.finish().await;
}

/// Issue 51.6a: an accepted link keeps its name, so 4,096 links with 60 KB names held 263 MiB
/// on one connection. A name over 1,024 bytes is refused with `amqp:invalid-field` saying
/// so; one of 1,024 bytes is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_name_over_1024_bytes_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    let long = "n".repeat(1025);
    client.send(sender_attach(long.clone(), 0, "q")).await;
    let reply = client.attach_reply(&long).await;
    assert!(reply.target.is_none(), "accepted: {reply:?}");
    let error = detach_error(&mut client, reply.handle.0).await;
    assert_eq!(
        error.condition,
        ErrorCondition::AmqpError(AmqpError::InvalidField),
        "{error:?}"
    );
    let description = error.description.unwrap_or_default();
    assert!(description.contains("1025 bytes"), "{description}");
    let longest = "n".repeat(1024);
    client.send(sender_attach(longest.clone(), 1, "q")).await;
    let reply = client.attach_reply(&longest).await;
    assert!(reply.target.is_some(), "refused: {reply:?}");
}

/// Defect 9: an oversized delivery sent pre-settled cannot be rejected, so its link is
/// detached with `amqp:link:message-size-exceeded`; a management client used to wait for
/// an answer that never came. The connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_presettled_delivery_detaches_its_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config("max_message_size = 1000"));
    let bystander = Bystander::start(broker.addr).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    for (handle, address) in [(0, "q/$management"), (1, "q")] {
        let name = client.request_sender(handle, address).await;
        let local = client.attach_reply(&name).await.handle.0;
        client
            .send(transfer(
                handle,
                handle,
                vec![1],
                true,
                message("big", 2000),
            ))
            .await;
        let error = detach_error(&mut client, local).await;
        assert_eq!(
            error.condition,
            ErrorCondition::LinkError(LinkError::MessageSizeExceeded),
            "{address}: {error:?}"
        );
    }
    client.attach_sender(2, "q").await;
    let sent = client.send_message(2, message("small", 10)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    print_peak(
        &broker,
        "an_oversized_presettled_delivery_detaches_its_link",
    );
    bystander.finish().await;
}

/// Defect 11: a delivery tag longer than AMQP's 32 bytes detaches its link with
/// `amqp:invalid-field`; 32 bytes are fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_tag_over_32_bytes_detaches_its_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));
    let bystander = Bystander::start(broker.addr).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    client
        .send(transfer(0, 0, vec![7; 32], false, message("tag-32", 10)))
        .await;
    let outcome = client.send_outcome(0).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    client
        .send(transfer(0, 1, vec![7; 33], false, message("tag-33", 10)))
        .await;
    let error = detach_error(&mut client, to_q).await;
    assert_eq!(
        error.condition,
        ErrorCondition::AmqpError(AmqpError::InvalidField),
        "{error:?}"
    );
    assert!(
        error
            .description
            .unwrap_or_default()
            .contains("at most 32 bytes"),
        "the detach says why"
    );
    print_peak(&broker, "a_delivery_tag_over_32_bytes_detaches_its_link");
    bystander.finish().await;
}

/// Defect 11: an attach whose handle is above the `handle-max` the broker advertised (1023)
/// closes the connection with `amqp:connection:framing-error` (AMQP 1.0 §2.7.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_above_handle_max_closes_the_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));
    let bystander = Bystander::start(broker.addr).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    client.attach_sender(1023, "q").await;
    client
        .send(sender_attach("too-high".to_owned(), 1024, "q"))
        .await;
    let error = super::close_error(&mut client.transport).await;
    assert_eq!(
        error.condition,
        ErrorCondition::ConnectionError(ConnectionError::FramingError),
        "{error:?}"
    );
    assert!(
        error.description.unwrap_or_default().contains("handle-max"),
        "the close says why"
    );
    print_peak(&broker, "a_handle_above_handle_max_closes_the_connection");
    bystander.finish().await;
}

/// The attach of a session receiver on `handle` that waits for the next available session of
/// `s`, with a filter entry of `filter_junk` bytes and `properties` null link properties.
fn waiting_session_receiver(handle: u32, filter_junk: usize, properties: usize) -> FrameBody {
    let mut filter = FilterSet::new();
    filter.insert(Symbol::from("com.microsoft:session-filter"), Value::Null);
    if filter_junk > 0 {
        filter.insert(Symbol::from("junk"), Value::String("f".repeat(filter_junk)));
    }
    let properties: Fields = (0..properties)
        .map(|n| (Symbol::from(format!("p{n:04}")), Value::Null))
        .collect();
    FrameBody::Attach(Attach {
        name: format!("waiting-{handle}"),
        handle: Handle(handle),
        role: Role::Receiver,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(
            Source::builder().address("s").filter(filter).build(),
        )),
        target: Some(Box::new(TargetArchetype::Target(
            Target::builder().address("here").build(),
        ))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: Some(properties),
    })
}

/// Defect 10: a session receiver waiting for a session kept its whole attach, decoded (a
/// 40 KB map of link properties takes ten times that decoded). It keeps only what its answer
/// echoes now, encoded, and that counts against the connection's budget of
/// 4 × `max_message_size`: past it, an attach is refused with `amqp:resource-limit-exceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receivers_waiting_for_a_session_keep_little_and_within_a_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(
        dir.path(),
        "[broker]\ndurability = \"memory\"\nallow_anonymous = true\nmax_message_size = 1000000\n\
         max_frame_size = 262144\n\n[[queues]]\nname = \"s\"\nrequires_session = true\n\n\
         [[queues]]\nname = \"bystander\"\n",
    );
    let bystander = Bystander::start(broker.addr).await;
    let (idle, _) = broker.memory_kib();
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    for handle in 0..500 {
        client
            .send(waiting_session_receiver(handle, 0, 5_000))
            .await;
    }
    // A sender's attach answers after every attach before it was handled.
    client.attach_sender(900, "s").await;
    let (held, peak) = broker.memory_kib();
    eprintln!(
        "500 session receivers waiting with 5,000 link properties each: broker {idle} KiB \
         idle, {held} KiB (peak {peak} KiB)"
    );
    // 100 KB filters are kept: the 40th such attach passes the 4 MB budget.
    for handle in 500..560 {
        client
            .send(waiting_session_receiver(handle, 100_000, 0))
            .await;
    }
    let name = client.request_sender(901, "s").await;
    let mut refused = Vec::new();
    loop {
        let body = client
            .expect("refusals, then the sender's attach", |body| {
                matches!(body, FrameBody::Attach(_) | FrameBody::Detach(_))
            })
            .await;
        match body {
            FrameBody::Attach(reply) if reply.name == name => break,
            FrameBody::Attach(reply) => {
                assert!(reply.source.is_none(), "only refusals answer: {reply:?}");
                let index: u32 = reply.name["waiting-".len()..].parse().expect("a number");
                refused.push(index - 500);
            }
            FrameBody::Detach(detach) => {
                let error = detach.error.expect("why");
                assert_eq!(
                    error.condition,
                    ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded),
                    "{error:?}"
                );
            }
            _ => unreachable!(),
        }
    }
    let refused_at = refused.first().copied();
    assert_eq!(refused_at, Some(39), "refused once the budget is used up");
    assert_eq!(refused.len(), 21, "and every one after: {refused:?}");
    assert!(
        held < idle + 16 * 1024,
        "the waiting receivers hold {} KiB",
        held - idle
    );
    print_peak(
        &broker,
        "receivers_waiting_for_a_session_keep_little_and_within_a_budget",
    );
    bystander.finish().await;
}

/// Service Bus lets a connection hold one `$cbs` link each way: a second sender or receiver is
/// refused (a null terminus, then a detach) with its words, and one may attach again once the
/// first detached. (The Go SDK's `TestAMQPLinksCBSLinkStillOpen` resets its connection on that
/// refusal.) Hand-made frames: fe2o3's client reports such a refusal in more than one way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_one_cbs_link_each_way() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    let first_sender = client.attach_sender(0, "$cbs").await;
    client
        .attach_receiver(1, "$cbs", ReceiverSettleMode::First)
        .await;
    let second_sender = client.request_sender(2, "$cbs").await;
    let refused_sender = client.attach_reply(&second_sender).await;
    assert!(refused_sender.target.is_none(), "{refused_sender:?}");
    let error = detach_error(&mut client, refused_sender.handle.0).await;
    assert_refused_as_a_second_cbs_link(error);
    let second_receiver = super::receiver_attach(3, "$cbs", ReceiverSettleMode::First);
    let receiver_name = second_receiver.name.clone();
    client.send(FrameBody::Attach(second_receiver)).await;
    let refused_receiver = client.attach_reply(&receiver_name).await;
    assert!(refused_receiver.source.is_none(), "{refused_receiver:?}");
    let error = detach_error(&mut client, refused_receiver.handle.0).await;
    assert_refused_as_a_second_cbs_link(error);
    client.detach(0).await;
    client
        .expect(
            "the broker's detach of the first sender",
            |body| matches!(body, FrameBody::Detach(d) if d.handle == Handle(first_sender)),
        )
        .await;
    client.attach_sender(4, "$cbs").await;
    broker.terminate();
}

/// Service Bus's refusal of a second `$cbs` link of one direction on a connection.
fn assert_refused_as_a_second_cbs_link(error: fe2o3_amqp::types::definitions::Error) {
    assert_eq!(
        error.condition,
        ErrorCondition::AmqpError(AmqpError::NotAllowed)
    );
    let description = error.description.unwrap_or_default();
    assert!(
        description.starts_with("A link to connection 'tidebus-")
            && description.ends_with("' $cbs node has already been opened."),
        "{description}"
    );
}
