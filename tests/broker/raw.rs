//! Hand-made frames against the real broker, on fe2o3-amqp's wire layer only (`Transport`,
//! `Frame`, the performatives). A client library hides what these tests pin: fe2o3-amqp's
//! `Receiver::accept` in settle mode second does not wait for the broker's settled disposition,
//! and its `Sender` refuses an oversized message before the broker sees it. Here the test is
//! the client, so every answer the broker owes is awaited (with a deadline) and checked.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::transport::protocol_header::ProtocolHeader;
use fe2o3_amqp::transport::Transport;
use fe2o3_amqp::types::definitions::{
    self, AmqpError, ConnectionError, DeliveryTag, ErrorCondition, Handle, LinkError,
    ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::message::DecodeIntoMessage;
use fe2o3_amqp::types::messaging::{
    Accepted, ApplicationProperties, Data, DeliveryState, Header, Message, MessageId, Modified,
    Properties, Rejected, Released, Source, Target, TargetArchetype,
};
use fe2o3_amqp::types::performatives::{
    Attach, Begin, ChannelMax, Detach, Disposition, Flow, MaxFrameSize, Open, Transfer,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Value};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

use crate::support::{config_with_queues, TestBroker, DEADLINE};

mod hostile;
mod hostile_links;
mod hostile_requests;
mod transactions;
mod websocket;

/// The session window the test client grants: far more transfer frames than any test sends.
const WINDOW: u32 = 1 << 20;

/// A client made of frames: one connection, one session on channel 0.
struct RawClient {
    transport: Transport<TcpStream, Frame>,
    /// The broker's max-frame-size: every frame we write fits it.
    remote_max_frame: usize,
    /// Transfer frames sent (our session's next-outgoing-id).
    next_outgoing_id: u32,
    /// Transfer frames received (the next-incoming-id we report in flows).
    next_incoming_id: u32,
    /// Delivery ids of the messages we send.
    next_delivery_id: u32,
    /// Frames read so far, for failure messages.
    seen: Vec<String>,
}

impl RawClient {
    /// Protocol header and `open`, nothing more.
    async fn open(addr: SocketAddr, max_frame: u32) -> Self {
        let mut stream = timeout(DEADLINE, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let header = <[u8; 8]>::from(ProtocolHeader::amqp());
        stream.write_all(&header).await.expect("write header");
        let mut answer = [0u8; 8];
        timeout(DEADLINE, stream.read_exact(&mut answer))
            .await
            .expect("header answered in time")
            .expect("read header");
        assert_eq!(answer, header, "the broker answers the plain AMQP header");
        let mut client = Self {
            transport: Transport::bind(stream, max_frame as usize, None),
            remote_max_frame: 512,
            next_outgoing_id: 0,
            next_incoming_id: 0,
            next_delivery_id: 0,
            seen: Vec::new(),
        };
        client
            .send(FrameBody::Open(Open {
                container_id: format!("raw-{}", uuid::Uuid::new_v4()),
                hostname: None,
                max_frame_size: MaxFrameSize(max_frame),
                channel_max: ChannelMax(0),
                idle_time_out: None,
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }))
            .await;
        let open = match client.expect("the broker's open", |_| true).await {
            FrameBody::Open(open) => open,
            other => panic!("expected the broker's open first, got {other:?}"),
        };
        client.remote_max_frame = open.max_frame_size.0 as usize;
        client
            .transport
            .set_encoder_max_frame_size(client.remote_max_frame);
        client
    }

    /// `open` and `begin`: ready to attach links.
    async fn connect(addr: SocketAddr, max_frame: u32) -> Self {
        let mut client = Self::open(addr, max_frame).await;
        client
            .send(FrameBody::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 0,
                incoming_window: WINDOW,
                outgoing_window: u32::MAX,
                handle_max: Handle(255),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }))
            .await;
        let begin = client
            .expect("the begin reply", |body| {
                matches!(body, FrameBody::Begin(_))
            })
            .await;
        let FrameBody::Begin(begin) = begin else {
            unreachable!()
        };
        assert_eq!(begin.remote_channel, Some(0), "the reply names our channel");
        client
    }

    /// Writes a frame whose body (after the frame header) is `body`, as encoded by hand.
    async fn send_raw(self, body: Vec<u8>) -> Self {
        let (mut write, read) = self.transport.into_framed_codec();
        timeout(DEADLINE, write.send(Bytes::from(frame_after_size(&body))))
            .await
            .expect("raw frame written in time")
            .expect("raw frame written");
        Self {
            transport: Transport::bind_to_framed_codec(write, read, None),
            ..self
        }
    }

    async fn send(&mut self, body: FrameBody) {
        if let FrameBody::Transfer { .. } = body {
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
        }
        timeout(DEADLINE, self.transport.send(Frame::new(0u16, body)))
            .await
            .expect("frame written in time")
            .expect("frame written");
    }

    /// Writes `bodies` in one write, so that the broker reads them all at once.
    async fn send_together(&mut self, bodies: Vec<FrameBody>) {
        for body in bodies {
            if let FrameBody::Transfer { .. } = body {
                self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            }
            let fed = self.transport.feed(Frame::new(0u16, body));
            timeout(DEADLINE, fed)
                .await
                .expect("frame buffered in time")
                .expect("frame buffered");
        }
        timeout(DEADLINE, self.transport.flush())
            .await
            .expect("frames written in time")
            .expect("frames written");
    }

    /// Reads frames until `pick` accepts one, and returns it. Empty frames and flows that
    /// `pick` does not want are skipped; any other frame is a failure, so a test that waits
    /// for one answer also checks that nothing else (a detach, an end, a close) came first.
    async fn expect(&mut self, what: &str, mut pick: impl FnMut(&FrameBody) -> bool) -> FrameBody {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let frame = match timeout_at(deadline, self.transport.next()).await {
                Err(_) => panic!(
                    "no {what} within {DEADLINE:?}; frames so far: {:#?}",
                    self.seen
                ),
                Ok(None) => panic!("socket closed waiting for {what}; frames: {:#?}", self.seen),
                Ok(Some(Err(error))) => panic!("transport error waiting for {what}: {error:?}"),
                Ok(Some(Ok(frame))) => frame,
            };
            if let FrameBody::Transfer { .. } = frame.body {
                self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
            }
            self.seen.push(format!("{:?}", frame.body));
            if pick(&frame.body) {
                return frame.body;
            }
            match frame.body {
                FrameBody::Empty | FrameBody::Flow(_) => continue,
                other => panic!(
                    "waiting for {what}, got an unexpected {other:?}; frames: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Attaches a receiver link (the broker sends) with `handle`; returns the broker's handle.
    async fn attach_receiver(
        &mut self,
        handle: u32,
        address: &str,
        rcv_settle_mode: ReceiverSettleMode,
    ) -> u32 {
        let attach = receiver_attach(handle, address, rcv_settle_mode.clone());
        let name = attach.name.clone();
        self.send(FrameBody::Attach(attach)).await;
        let reply = self.attach_reply(&name).await;
        assert_eq!(reply.role, Role::Sender, "the broker sends on {name}");
        assert!(reply.source.is_some(), "{name} refused: {reply:?}");
        assert_eq!(reply.rcv_settle_mode, rcv_settle_mode, "mode mirrored");
        assert_eq!(reply.initial_delivery_count, Some(0));
        reply.handle.0
    }

    /// Attaches a sender link (the broker receives) and waits for its credit; returns the
    /// broker's handle.
    async fn attach_sender(&mut self, handle: u32, address: &str) -> u32 {
        let name = self.request_sender(handle, address).await;
        let reply = self.attach_reply(&name).await;
        assert_eq!(reply.role, Role::Receiver, "the broker receives on {name}");
        assert!(reply.target.is_some(), "{name} refused: {reply:?}");
        let local = reply.handle.0;
        self.expect("credit for the sender", |body| {
            matches!(body, FrameBody::Flow(flow)
                if flow.handle == Some(Handle(local)) && flow.link_credit.unwrap_or(0) > 0)
        })
        .await;
        local
    }

    /// Sends the attach of a sender link (the broker receives) and returns the link's name;
    /// the reply is the caller's to read.
    async fn request_sender(&mut self, handle: u32, address: &str) -> String {
        let name = format!("sender-{handle}");
        self.send(FrameBody::Attach(Attach {
            name: name.clone(),
            handle: Handle(handle),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source::builder().address(name.as_str()).build())),
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
        }))
        .await;
        name
    }

    async fn attach_reply(&mut self, name: &str) -> Attach {
        let body = self
            .expect(
                "the attach reply",
                |body| matches!(body, FrameBody::Attach(reply) if reply.name == name),
            )
            .await;
        let FrameBody::Attach(reply) = body else {
            unreachable!()
        };
        reply
    }

    /// A link flow for one of our receiver links.
    async fn flow(&mut self, handle: u32, delivery_count: u32, credit: u32, drain: bool) {
        let flow = self.link_flow(handle, delivery_count, credit, drain);
        self.send(FrameBody::Flow(flow)).await;
    }

    /// Detaches (closes) our link `handle`.
    async fn detach(&mut self, handle: u32) {
        self.send(FrameBody::Detach(Detach {
            handle: Handle(handle),
            closed: true,
            error: None,
        }))
        .await;
    }

    /// The flow [`RawClient::flow`] sends.
    fn link_flow(&self, handle: u32, delivery_count: u32, credit: u32, drain: bool) -> Flow {
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: WINDOW,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: Some(Handle(handle)),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            available: None,
            drain,
            echo: false,
            properties: None,
        }
    }

    /// Sends one unsettled message on our sender link `handle`, split into frames that fit
    /// the broker's max-frame-size. Returns its delivery id.
    async fn send_message(&mut self, handle: u32, message: Bytes) -> u32 {
        self.send_in_state(handle, message, None).await
    }

    /// [`RawClient::send_message`] with a delivery state on its first frame (a transaction's).
    async fn send_in_state(
        &mut self,
        handle: u32,
        message: Bytes,
        state: Option<DeliveryState>,
    ) -> u32 {
        let (delivery_id, frames) = self.transfer_frames(handle, message, state);
        for frame in frames {
            self.send(frame).await;
        }
        delivery_id
    }

    /// The transfer frames of one unsettled message on our sender link `handle`, each fitting
    /// the broker's max-frame-size, and its delivery id.
    fn transfer_frames(
        &mut self,
        handle: u32,
        message: Bytes,
        state: Option<DeliveryState>,
    ) -> (u32, Vec<FrameBody>) {
        let delivery_id = self.next_delivery_id;
        self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
        let mut performative = Transfer {
            handle: Handle(handle),
            delivery_id: Some(delivery_id),
            delivery_tag: Some(DeliveryTag::from(delivery_id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            rcv_settle_mode: None,
            state,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let mut frames = Vec::new();
        let mut rest = message;
        loop {
            performative.more = true;
            let overhead = 8 + serde_amqp::serialized_size(&performative).expect("size");
            let room = self.remote_max_frame - overhead;
            let chunk = rest.split_to(room.min(rest.len()));
            performative.more = !rest.is_empty();
            let more = performative.more;
            frames.push(FrameBody::Transfer {
                performative,
                payload: chunk,
            });
            if !more {
                return (delivery_id, frames);
            }
            performative = Transfer {
                handle: Handle(handle),
                delivery_id: None,
                delivery_tag: None,
                message_format: None,
                settled: None,
                more: true,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
        }
    }

    /// The outcomes of `count` of our sends, by delivery id, however the broker ranges and
    /// orders their dispositions (a rejection leaves at once, acceptances in ranges after).
    async fn send_outcomes(&mut self, count: usize) -> BTreeMap<u32, DeliveryState> {
        let mut outcomes = BTreeMap::new();
        while outcomes.len() < count {
            let body = self
                .expect(
                    "the sends' outcomes",
                    |body| matches!(body, FrameBody::Disposition(d) if d.role == Role::Receiver),
                )
                .await;
            let FrameBody::Disposition(disposition) = body else {
                unreachable!()
            };
            let state = disposition.state.expect("the disposition carries a state");
            for id in disposition.first..=disposition.last.unwrap_or(disposition.first) {
                outcomes.insert(id, state.clone());
            }
        }
        outcomes
    }

    /// The broker's settled disposition for one of our sends; returns its outcome.
    async fn send_outcome(&mut self, delivery_id: u32) -> DeliveryState {
        self.settled_disposition(Role::Receiver, delivery_id).await
    }

    /// The next delivery on the broker's link `handle`, reassembled: first frame and payload.
    async fn delivery(&mut self, handle: u32) -> (Transfer, Bytes) {
        let mut first: Option<Transfer> = None;
        let mut payload = BytesMut::new();
        loop {
            let body = self
                .expect("a transfer", |body| {
                    matches!(body, FrameBody::Transfer { performative, .. }
                        if performative.handle == Handle(handle))
                })
                .await;
            let FrameBody::Transfer {
                performative,
                payload: chunk,
            } = body
            else {
                unreachable!()
            };
            payload.extend_from_slice(&chunk);
            let more = performative.more;
            first.get_or_insert(performative);
            if !more {
                let first = first.expect("first frame");
                return (first, payload.freeze());
            }
        }
    }

    /// Settles (or, with `settled` false, proposes an outcome for) a delivery we received.
    async fn dispose(&mut self, delivery_id: u32, settled: bool, state: DeliveryState) {
        self.send(FrameBody::Disposition(Disposition {
            role: Role::Receiver,
            first: delivery_id,
            last: None,
            settled,
            state: Some(state),
            batchable: false,
        }))
        .await;
    }

    /// Proposes `state` for a delivery the broker sent, unsettled (settle mode second), and
    /// returns the state of the broker's settled confirmation.
    async fn settle_second(&mut self, delivery_id: u32, state: DeliveryState) -> DeliveryState {
        self.dispose(delivery_id, false, state).await;
        self.settled_disposition(Role::Sender, delivery_id).await
    }

    /// The broker's disposition covering `delivery_id`, sent in `role`; it must be settled.
    async fn settled_disposition(&mut self, role: Role, delivery_id: u32) -> DeliveryState {
        let what = format!("a {role:?} disposition for delivery {delivery_id}");
        let body = self
            .expect(&what, |body| {
                matches!(body, FrameBody::Disposition(d)
                    if d.role == role
                        && d.first <= delivery_id
                        && delivery_id <= d.last.unwrap_or(d.first))
            })
            .await;
        let FrameBody::Disposition(disposition) = body else {
            unreachable!()
        };
        assert!(disposition.settled, "{what} is settled: {disposition:?}");
        disposition.state.expect("the disposition carries a state")
    }
}

/// An encoded message: header, properties with `id` as message-id, one application property,
/// and a data section with `body_len` bytes.
fn message(id: &str, body_len: usize) -> Bytes {
    let mut bytes = prefix(id);
    let body: Vec<u8> = (0..body_len).map(|i| (i % 251) as u8).collect();
    bytes.extend(serde_amqp::to_vec(&Data(Binary::from(body))).expect("data"));
    Bytes::from(bytes)
}

/// A message of exactly `total` encoded bytes (at least a few hundred).
fn message_of_size(id: &str, total: usize) -> Bytes {
    // A data section over 255 bytes: descriptor (3 bytes), vbin32 code and length (5 bytes).
    let message = message(id, total - prefix(id).len() - 8);
    assert_eq!(message.len(), total, "message size");
    message
}

fn prefix(id: &str) -> Vec<u8> {
    let mut bytes = serde_amqp::to_vec(&Header::builder().durable(true).build()).expect("header");
    let properties = Properties::builder().message_id(id.to_string()).build();
    bytes.extend(serde_amqp::to_vec(&properties).expect("properties"));
    let application = ApplicationProperties::builder()
        .insert("test", SimpleValue::String("raw".into()))
        .build();
    bytes.extend(serde_amqp::to_vec(&application).expect("application properties"));
    bytes
}

/// Decodes a delivered message.
fn decode(payload: &Bytes) -> Message<Data> {
    Data::decode_message_from_reader(serde_amqp::read::SliceReader::new(payload))
        .expect("the delivered message decodes")
}

/// The message-id and the header's delivery-count of a delivered message.
fn id_and_count(payload: &Bytes) -> (String, u32) {
    let message = decode(payload);
    let id = match message.properties.and_then(|p| p.message_id) {
        Some(MessageId::String(id)) => id,
        other => panic!("message-id missing or not a string: {other:?}"),
    };
    let count = message.header.expect("the broker always sends a header");
    (id, count.delivery_count)
}

/// A peek-lock transfer: unsettled, with the 16-byte lock token as its tag. Returns its id.
fn peek_locked(transfer: &Transfer) -> u32 {
    assert_eq!(
        transfer.settled,
        Some(false),
        "peek-lock transfers are unsettled"
    );
    let tag = transfer.delivery_tag.as_ref().expect("delivery tag");
    assert_eq!(tag.len(), 16, "the delivery tag is the 16-byte lock token");
    transfer.delivery_id.expect("delivery id")
}

fn condition_of(state: &DeliveryState) -> Option<&ErrorCondition> {
    match state {
        DeliveryState::Rejected(rejected) => rejected.error.as_ref().map(|e| &e.condition),
        _ => None,
    }
}

/// A broker with the given queues and its config adjusted by `tune`.
async fn broker(queues: &[&str], tune: impl FnOnce(&mut tidebus::config::Config)) -> TestBroker {
    let mut config = config_with_queues(queues);
    tune(&mut config);
    TestBroker::start(config).await
}

/// Grants one credit on our receiver link `handle` (whose broker handle is `link`) and takes
/// the peek-locked delivery: its id, message-id and delivery-count.
async fn receive_one(
    client: &mut RawClient,
    handle: u32,
    link: u32,
    delivered: &mut u32,
) -> (u32, (String, u32)) {
    client.flow(handle, *delivered, 1, false).await;
    let (transfer, payload) = client.delivery(link).await;
    *delivered += 1;
    (peek_locked(&transfer), id_and_count(&payload))
}

/// The completions a client settles itself are gathered over the connection's turn and reach
/// the entity as one command when the turn ends. A detach read in the same turn waits for
/// their answer (so that its reply says they are applied): it is answered at once, not at the
/// barrier's deadline, and none of the messages comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_read_with_a_detach_are_applied_before_it() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    for id in 0..20 {
        let sent = client
            .send_message(to_q, message(&id.to_string(), 100))
            .await;
        client.send_outcome(sent).await;
    }
    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::First)
        .await;
    client.flow(1, 0, 20, false).await;
    let mut together = Vec::new();
    for _ in 0..20 {
        let (transfer, _) = client.delivery(from_q).await;
        together.push(FrameBody::Disposition(Disposition {
            role: Role::Receiver,
            first: peek_locked(&transfer),
            last: None,
            settled: true,
            state: Some(DeliveryState::Accepted(Accepted {})),
            batchable: false,
        }));
    }
    together.push(FrameBody::Detach(Detach {
        handle: Handle(1),
        closed: true,
        error: None,
    }));
    client.send_together(together).await;
    client
        .expect("the detach reply", |body| {
            matches!(body, FrameBody::Detach(_))
        })
        .await;
    let sent = client.send_message(to_q, message("sentinel", 100)).await;
    client.send_outcome(sent).await;
    let again = client
        .attach_receiver(2, "q", ReceiverSettleMode::First)
        .await;
    let mut delivered = 0;
    let (_, (id, _)) = receive_one(&mut client, 2, again, &mut delivered).await;
    assert_eq!(id, "sentinel", "a completed message came back");
    broker.stop().await;
}

/// Settle mode second (amqp-dialect.md §6.1): every outcome the client proposes with an
/// unsettled disposition is confirmed by a settled disposition of the same kind, from the
/// broker as sender; released redelivers without counting, modified counts one delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_second_confirms_accepted_released_and_modified() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    for id in ["one", "two"] {
        let sent = client.send_message(to_q, message(id, 100)).await;
        let outcome = client.send_outcome(sent).await;
        assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    }
    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::Second)
        .await;
    let mut delivered = 0u32;

    let (first, message) = receive_one(&mut client, 1, from_q, &mut delivered).await;
    assert_eq!(message, ("one".to_string(), 0));
    let echo = client
        .settle_second(first, DeliveryState::Accepted(Accepted {}))
        .await;
    assert!(matches!(echo, DeliveryState::Accepted(_)), "{echo:?}");

    let (second, message) = receive_one(&mut client, 1, from_q, &mut delivered).await;
    assert_eq!(message, ("two".to_string(), 0));
    let echo = client
        .settle_second(second, DeliveryState::Released(Released {}))
        .await;
    assert!(matches!(echo, DeliveryState::Released(_)), "{echo:?}");

    let (third, message) = receive_one(&mut client, 1, from_q, &mut delivered).await;
    assert_eq!(message, ("two".to_string(), 0), "released: not counted");
    let modified = Modified {
        delivery_failed: None,
        undeliverable_here: None,
        message_annotations: None,
    };
    let echo = client
        .settle_second(third, DeliveryState::Modified(modified))
        .await;
    assert!(matches!(echo, DeliveryState::Modified(_)), "{echo:?}");

    let (fourth, message) = receive_one(&mut client, 1, from_q, &mut delivered).await;
    assert_eq!(message, ("two".to_string(), 1), "modified: counted once");
    let echo = client
        .settle_second(fourth, DeliveryState::Accepted(Accepted {}))
        .await;
    assert!(matches!(echo, DeliveryState::Accepted(_)), "{echo:?}");
    broker.stop().await;
}

/// A dead-letter proposed in settle mode second, as the SDKs send it (`rejected` with
/// condition `com.microsoft:dead-letter` and the reason in the error's info), moves the message
/// to `q/$deadletterqueue` and is confirmed by a settled `rejected` that carries **no** error
/// (amqp-dialect.md §17: the JavaScript SDK's `deadLetterMessage` throws on an echoed error).
///
/// Broker bug: `Session::on_settled` echoes the client's state verbatim, error included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_second_confirms_a_dead_letter_with_a_bare_rejected() {
    dead_letter_is_confirmed(false).await;
}

/// The JavaScript SDK (`@azure/service-bus` 7.9.5, through rhea) encodes the keys of the
/// rejected error's `info` as strings, not the symbols AMQP's `fields` names; Service Bus
/// takes them, and so does the broker: the message is dead-lettered with its reason and the
/// connection goes on (it used to be closed with `amqp:decode-error`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_info_keys_are_strings_is_taken_as_service_bus_does() {
    dead_letter_is_confirmed(true).await;
}

/// Dead-letters a message with a reason and a description in settle mode second, the
/// `info` keys encoded as symbols or (`string_keys`) as strings, and checks the bare
/// `rejected` confirmation, the dead-letter queue, and that the connection still sends.
async fn dead_letter_is_confirmed(string_keys: bool) {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    let sent = client.send_message(to_q, message("doomed", 100)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::Second)
        .await;
    let (id, received) = receive_one(&mut client, 1, from_q, &mut 0).await;
    assert_eq!(received, ("doomed".to_string(), 0));
    let mut info = definitions::Fields::new();
    info.insert(
        Symbol::from("DeadLetterReason"),
        Value::String("Broken".into()),
    );
    info.insert(
        Symbol::from("DeadLetterErrorDescription"),
        Value::String("it broke".into()),
    );
    let proposal = Rejected {
        error: Some(definitions::Error::new(
            ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
            Some("it broke".to_string()),
            Some(info),
        )),
    };
    let echo = if string_keys {
        let disposition = Disposition {
            role: Role::Receiver,
            first: id,
            last: None,
            settled: false,
            state: Some(DeliveryState::Rejected(proposal)),
            batchable: false,
        };
        let mut body = serde_amqp::to_vec(&disposition).expect("disposition");
        for key in ["DeadLetterReason", "DeadLetterErrorDescription"] {
            let mut symbol = vec![0xa3, key.len() as u8];
            symbol.extend_from_slice(key.as_bytes());
            let at = body
                .windows(symbol.len())
                .position(|window| window == symbol)
                .expect("the key is in the frame");
            body[at] = 0xa1;
        }
        client = client.send_raw(body).await;
        client.settled_disposition(Role::Sender, id).await
    } else {
        client
            .settle_second(id, DeliveryState::Rejected(proposal))
            .await
    };

    let from_dlq = client
        .attach_receiver(2, "q/$deadletterqueue", ReceiverSettleMode::Second)
        .await;
    client.flow(2, 0, 1, false).await;
    let (_, payload) = client.delivery(from_dlq).await;
    let dead = decode(&payload);
    let reason = dead
        .application_properties
        .as_ref()
        .and_then(|properties| properties.get("DeadLetterReason").cloned());
    assert_eq!(reason, Some(SimpleValue::String("Broken".into())));
    assert_eq!(id_and_count(&payload).0, "doomed");

    assert!(
        matches!(&echo, DeliveryState::Rejected(Rejected { error: None })),
        "a successful dead-letter is confirmed by a bare rejected: {echo:?}"
    );
    let sent = client.send_message(to_q, message("after", 10)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    broker.stop().await;
}

/// A settlement that arrives after the lock expired is refused with a settled
/// `rejected{com.microsoft:message-lock-lost}` (amqp-dialect.md §6.1, §11.2); the expiry
/// counts a delivery and the message goes to another receiver under a new lock token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_after_the_lock_expired_is_rejected_with_lock_lost() {
    let broker = broker(&["q"], |config| {
        config.queues[0].lock_duration = std::time::Duration::from_secs(1);
    })
    .await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    let sent = client.send_message(to_q, message("locked", 100)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");

    let first_link = client
        .attach_receiver(1, "q", ReceiverSettleMode::Second)
        .await;
    client.flow(1, 0, 1, false).await;
    let (transfer, payload) = client.delivery(first_link).await;
    let first = peek_locked(&transfer);
    assert_eq!(id_and_count(&payload), ("locked".to_string(), 0));

    // A second receiver gets the message only once the first lock has expired.
    let second_link = client
        .attach_receiver(2, "q", ReceiverSettleMode::Second)
        .await;
    client.flow(2, 0, 1, false).await;
    let (again, payload) = client.delivery(second_link).await;
    let second = peek_locked(&again);
    assert_eq!(
        id_and_count(&payload),
        ("locked".to_string(), 1),
        "lock expiry counts a delivery"
    );
    assert_ne!(
        again.delivery_tag, transfer.delivery_tag,
        "a new lock, a new token"
    );

    let echo = client
        .settle_second(first, DeliveryState::Accepted(Accepted {}))
        .await;
    assert_eq!(
        condition_of(&echo),
        Some(&ErrorCondition::Custom(Symbol::from(
            "com.microsoft:message-lock-lost"
        ))),
        "{echo:?}"
    );

    // The current lock holder completes it.
    let echo = client
        .settle_second(second, DeliveryState::Accepted(Accepted {}))
        .await;
    assert!(matches!(echo, DeliveryState::Accepted(_)), "{echo:?}");
    broker.stop().await;
}

/// A message over `max_message_size`, sent across many 512-byte frames, is refused with a
/// settled `rejected{amqp:link:message-size-exceeded}` (amqp-dialect.md §11.2); the link is
/// not detached and takes the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_rejected_and_the_link_stays() {
    let broker = broker(&["q"], |config| {
        config.broker.max_message_size = 1000;
        config.broker.max_frame_size = 512;
    })
    .await;
    let mut client = RawClient::connect(broker.addr, 512).await;
    assert_eq!(client.remote_max_frame, 512);
    let to_q = client.attach_sender(0, "q").await;
    let frames_before = client.next_outgoing_id;
    let big = client
        .send_message(to_q, message_of_size("big", 5000))
        .await;
    assert!(
        client.next_outgoing_id - frames_before >= 10,
        "5000 bytes take at least ten 512-byte frames"
    );
    let outcome = client.send_outcome(big).await;
    assert_eq!(
        condition_of(&outcome),
        Some(&ErrorCondition::LinkError(LinkError::MessageSizeExceeded)),
        "{outcome:?}"
    );

    // `expect` fails on any detach, end or close, so reaching the next outcome proves the
    // link stayed attached.
    let small = client.send_message(to_q, message("small", 100)).await;
    let outcome = client.send_outcome(small).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::First)
        .await;
    client.flow(1, 0, 1, false).await;
    let (_, payload) = client.delivery(from_q).await;
    assert_eq!(
        id_and_count(&payload).0,
        "small",
        "only the small one was stored"
    );
    broker.stop().await;
}

/// Issue 56.5: a management request over `max_message_size` is accepted and answered on its
/// reply link with 403 `amqp:link:message-size-exceeded` and its message-id (a client waiting
/// for the response ignores a rejected delivery); one whose first bytes name no message-id
/// cannot be answered, so its link alone is detached with that error, and the connection goes
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_management_request_is_answered_and_an_unnamed_one_detaches_its_link() {
    let broker = broker(&["q"], |config| config.broker.max_message_size = 1000).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    client
        .attach_receiver(0, "q/$management", ReceiverSettleMode::First)
        .await;
    let requests = client.attach_sender(1, "q/$management").await;
    client.flow(0, 0, 10, false).await;
    let mut request = serde_amqp::to_vec(&Properties {
        message_id: Some(MessageId::Ulong(7)),
        reply_to: Some("receiver-0".into()),
        ..Properties::default()
    })
    .expect("properties");
    let mut operation = fe2o3_amqp::types::primitives::OrderedMap::new();
    operation.insert(
        "operation".to_string(),
        SimpleValue::String("com.microsoft:schedule-message".into()),
    );
    request.extend(serde_amqp::to_vec(&ApplicationProperties(operation)).expect("app"));
    request.extend(serde_amqp::to_vec(&Data(Binary::from(vec![7u8; 5000]))).expect("body"));
    let sent = client.send_message(requests, Bytes::from(request)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    let (_, answer) = client.delivery(0).await;
    let (answer, status) = hostile_requests::answer_status(&answer);
    assert_eq!(status, Some(SimpleValue::Int(403)));
    let properties = answer.application_properties.expect("status").0;
    assert_eq!(
        properties.get("errorCondition"),
        Some(&SimpleValue::Symbol(Symbol::from(
            "amqp:link:message-size-exceeded"
        )))
    );
    let correlation = answer.properties.and_then(|p| p.correlation_id);
    assert_eq!(correlation, Some(MessageId::Ulong(7)));

    client
        .send_message(requests, Bytes::from(vec![0x40u8; 2000]))
        .await;
    let detach = client
        .expect("the request link's detach", |body| {
            matches!(body, FrameBody::Detach(_))
        })
        .await;
    let FrameBody::Detach(detach) = detach else {
        unreachable!()
    };
    let error = detach.error.expect("the detach says why");
    assert_eq!(
        error.condition,
        ErrorCondition::LinkError(LinkError::MessageSizeExceeded)
    );
    let to_q = client.attach_sender(2, "q").await;
    let sent = client.send_message(to_q, message("after", 10)).await;
    let outcome = client.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    broker.stop().await;
}

/// A broker whose queue `q` holds 1 MiB (`max_size_in_megabytes = 1`), a client and its
/// sender link to `q`.
async fn sender_to_one_mib_queue() -> (TestBroker, RawClient, u32) {
    let broker = broker(&["q"], |config| {
        config.queues[0].max_size_in_megabytes = 1;
    })
    .await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_q = client.attach_sender(0, "q").await;
    (broker, client, to_q)
}

/// A queue of `max_size_in_megabytes = 1` takes three 300,000-byte messages and refuses the
/// fourth with `rejected{amqp:resource-limit-exceeded}` (amqp-dialect.md §11.2); completing one
/// makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_rejects_with_resource_limit_exceeded_until_room_is_made() {
    let (broker, mut client, to_q) = sender_to_one_mib_queue().await;
    for i in 1..=3 {
        let sent = client
            .send_message(to_q, message_of_size(&format!("m{i}"), 300_000))
            .await;
        let outcome = client.send_outcome(sent).await;
        assert!(
            matches!(outcome, DeliveryState::Accepted(_)),
            "message {i} fits: {outcome:?}"
        );
    }
    let sent = client
        .send_message(to_q, message_of_size("m4", 300_000))
        .await;
    let outcome = client.send_outcome(sent).await;
    assert_eq!(
        condition_of(&outcome),
        Some(&ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)),
        "1,200,000 bytes exceed 1 MiB: {outcome:?}"
    );

    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::Second)
        .await;
    client.flow(1, 0, 1, false).await;
    let (transfer, payload) = client.delivery(from_q).await;
    let id = peek_locked(&transfer);
    assert_eq!(id_and_count(&payload).0, "m1");
    let echo = client
        .settle_second(id, DeliveryState::Accepted(Accepted {}))
        .await;
    assert!(matches!(echo, DeliveryState::Accepted(_)), "{echo:?}");

    let sent = client
        .send_message(to_q, message_of_size("m5", 300_000))
        .await;
    let outcome = client.send_outcome(sent).await;
    assert!(
        matches!(outcome, DeliveryState::Accepted(_)),
        "room again after a complete: {outcome:?}"
    );
    broker.stop().await;
}

/// Sends read in one turn reach their queue as one command, yet each transfer keeps its own
/// outcome: of four written at once to a queue of 1 MiB, the one the quota cannot take is
/// rejected and the others, the one after it too, are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_written_together_are_each_answered_one_refused_by_the_quota() {
    let (broker, mut client, to_q) = sender_to_one_mib_queue().await;
    let mut frames = Vec::new();
    let mut sent = Vec::new();
    for (id, size) in [
        ("m1", 300_000),
        ("m2", 300_000),
        ("m3", 600_000),
        ("m4", 300_000),
    ] {
        let (delivery_id, more) = client.transfer_frames(to_q, message_of_size(id, size), None);
        frames.extend(more);
        sent.push(delivery_id);
    }
    client.send_together(frames).await;
    let outcomes = client.send_outcomes(sent.len()).await;
    let outcomes: BTreeMap<u32, Option<ErrorCondition>> = (outcomes.iter())
        .map(|(id, state)| (*id, condition_of(state).cloned()))
        .collect();
    let full = Some(ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded));
    let expected = sent.iter().copied().zip([None, None, full, None]);
    assert_eq!(outcomes, expected.collect(), "m3 alone exceeds 1 MiB");

    let from_q = client
        .attach_receiver(1, "q", ReceiverSettleMode::First)
        .await;
    client.flow(1, 0, 3, false).await;
    let mut received = Vec::new();
    for _ in 0..3 {
        let (_, payload) = client.delivery(from_q).await;
        received.push(id_and_count(&payload).0);
    }
    assert_eq!(received, ["m1", "m2", "m4"]);
    broker.stop().await;
}

/// Drain on an empty queue (amqp-dialect.md §4.4): the broker uses up the credit and answers
/// at once with a flow carrying drain, link-credit 0 and the delivery-count advanced by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_an_empty_queue_is_echoed_with_the_credit_used_up() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let from_q = client
        .attach_receiver(0, "q", ReceiverSettleMode::Second)
        .await;
    client.flow(0, 0, 10, true).await;
    let body = client
        .expect(
            "the drain answer",
            |body| matches!(body, FrameBody::Flow(flow) if flow.handle == Some(Handle(from_q))),
        )
        .await;
    let FrameBody::Flow(flow) = body else {
        unreachable!()
    };
    assert_eq!(
        (flow.drain, flow.link_credit, flow.delivery_count),
        (true, Some(0), Some(10)),
        "{flow:?}"
    );
    broker.stop().await;
}

/// A message whose properties carry `group_id` (encoded) as the group-id, and whose message
/// annotations carry `partition_key` (encoded) as `x-opt-partition-key`, if given.
fn with_session_fields(group_id: &[u8], partition_key: Option<&[u8]>) -> Bytes {
    let mut bytes = Vec::new();
    if let Some(key) = partition_key {
        let name = b"x-opt-partition-key";
        let mut map = vec![0xa3, name.len() as u8];
        map.extend_from_slice(name);
        map.extend_from_slice(key);
        bytes.extend([0x00, 0x53, 0x72, 0xc1, map.len() as u8 + 1, 2]);
        bytes.extend(map);
    }
    // properties: ten nulls, then the group-id.
    let mut fields = vec![0x40; 10];
    fields.extend_from_slice(group_id);
    bytes.extend([0x00, 0x53, 0x73, 0xc0, fields.len() as u8 + 1, 11]);
    bytes.extend(fields);
    bytes.extend(serde_amqp::to_vec(&Data(Binary::from(vec![1, 2, 3]))).expect("data"));
    Bytes::from(bytes)
}

/// A partitioned queue that requires sessions refuses a message whose session id or partition
/// key is not text, saying which and what is wrong with it (issue 51: a group-id of another
/// type was refused as if none were set, a partition key of another type taken silently);
/// the link stays, and a message with a valid session id is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_or_partition_key_that_is_not_text_is_refused_naming_it() {
    let broker = broker(&["ps"], |config| {
        config.queues[0].partitions = Some(4);
        config.queues[0].requires_session = true;
    })
    .await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_ps = client.attach_sender(0, "ps").await;
    let session = b"\xa1\x04cart";
    // (encoded group-id, encoded partition key, the field the refusal names)
    type Case<'a> = (&'a [u8], Option<&'a [u8]>, &'a str);
    let cases: [Case; 3] = [
        (b"\x53\x07", None, "group-id (the SessionId)"),
        (b"\xa1\x02\xff\xfe", None, "group-id (the SessionId)"),
        (
            session,
            Some(b"\x54\x07"),
            "x-opt-partition-key (the PartitionKey)",
        ),
    ];
    for (group_id, key, named) in cases {
        let sent = client
            .send_message(to_ps, with_session_fields(group_id, key))
            .await;
        let state = client.send_outcome(sent).await;
        let DeliveryState::Rejected(rejected) = &state else {
            panic!("{named}: {state:?}");
        };
        let description = rejected
            .error
            .as_ref()
            .and_then(|error| error.description.clone())
            .unwrap_or_default();
        assert!(
            description.contains(named) && description.contains("must be a string"),
            "{named}: {description}"
        );
    }
    let sent = client
        .send_message(to_ps, with_session_fields(session, Some(session)))
        .await;
    let state = client.send_outcome(sent).await;
    assert!(matches!(state, DeliveryState::Accepted(_)), "{state:?}");
    broker.stop().await;
}

/// The attach of our receiver link `handle` (named `receiver-<handle>`) from `address`.
fn receiver_attach(handle: u32, address: &str, rcv_settle_mode: ReceiverSettleMode) -> Attach {
    let name = format!("receiver-{handle}");
    Attach {
        name: name.clone(),
        handle: Handle(handle),
        role: Role::Receiver,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode,
        source: Some(Box::new(Source::builder().address(address).build())),
        target: Some(Box::new(TargetArchetype::Target(
            Target::builder().address(name.as_str()).build(),
        ))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A receiver that grants credit in the same write as its attach (as python-qpid-proton's
/// `create_receiver(address, credit=10)` does), on a queue of four partitions that all hold
/// messages, eight times: the broker answers the attach before it sends a transfer on it
/// (issue 51; the partitions register one by one, and one that had registered delivered at
/// once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_answers_an_attach_before_it_delivers_on_it() {
    let broker = broker(&["p"], |config| config.queues[0].partitions = Some(4)).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    let to_p = client.attach_sender(0, "p").await;
    for id in 0..16 {
        client
            .send_message(to_p, message(&format!("m{id}"), 10))
            .await;
    }
    assert_eq!(client.send_outcomes(16).await.len(), 16);
    for round in 1..=8u32 {
        let attach = receiver_attach(round, "p", ReceiverSettleMode::Second);
        let name = attach.name.clone();
        let flow = client.link_flow(round, 0, 1, false);
        client
            .send_together(vec![FrameBody::Attach(attach), FrameBody::Flow(flow)])
            .await;
        // `expect` fails on a transfer that comes before the attach reply.
        let reply = client.attach_reply(&name).await;
        let (transfer, _) = client.delivery(reply.handle.0).await;
        assert_eq!(transfer.handle, reply.handle);
        // Its message stays locked: each round takes another of the sixteen.
        client.detach(round).await;
        client
            .expect("the detach reply", |body| {
                matches!(body, FrameBody::Detach(_))
            })
            .await;
    }
    broker.stop().await;
}

/// Bytes of a frame after its 4-byte size: data offset 2, type 0 (AMQP), channel 0, `body`.
fn frame_after_size(body: &[u8]) -> Vec<u8> {
    let mut frame = vec![2u8, 0, 0, 0];
    frame.extend_from_slice(body);
    frame
}

/// Writes `frame` (everything after the 4-byte size, which the codec adds) on the client's
/// socket and gives back a transport to read the answer.
async fn write_raw(client: RawClient, frame: Vec<u8>) -> Transport<TcpStream, Frame> {
    let (mut write, read) = client.transport.into_framed_codec();
    timeout(DEADLINE, write.send(Bytes::from(frame)))
        .await
        .expect("raw frame written in time")
        .expect("raw frame written");
    Transport::bind_to_framed_codec(write, read, None)
}

/// Writes a malformed `frame` on an opened connection, then expects the broker's `close` with
/// one of `conditions` and the socket to close. Another connection works afterwards.
async fn malformed_frame_after_open(frame: Vec<u8>) {
    let conditions = [
        ErrorCondition::AmqpError(AmqpError::DecodeError),
        ErrorCondition::ConnectionError(ConnectionError::FramingError),
    ];
    let broker = broker(&["q"], |_| {}).await;
    let client = RawClient::open(broker.addr, 65536).await;
    let mut transport = write_raw(client, frame).await;
    let error = close_error(&mut transport).await;
    let deadline = Instant::now() + DEADLINE;
    assert!(
        conditions.contains(&error.condition),
        "close condition {:?} not one of {conditions:?}: {error:?}",
        error.condition
    );
    wait_for_socket_close(&mut transport, deadline).await;
    let mut next = RawClient::connect(broker.addr, 65536).await;
    let to_q = next.attach_sender(0, "q").await;
    let sent = next.send_message(to_q, message("after", 10)).await;
    let outcome = next.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    broker.stop().await;
}

/// Reads until the broker's `close` and returns its error; a close without one fails.
async fn close_error(transport: &mut Transport<TcpStream, Frame>) -> definitions::Error {
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    loop {
        match timeout_at(deadline, transport.next()).await {
            Err(_) => panic!("no close within {DEADLINE:?}; frames: {seen:#?}"),
            Ok(Some(Ok(Frame {
                body: FrameBody::Close(close),
                ..
            }))) => return close.error.expect("the close carries an error"),
            Ok(Some(Ok(frame))) => seen.push(format!("{:?}", frame.body)),
            Ok(Some(Err(error))) => panic!("socket failed before a close: {error:?}; {seen:#?}"),
            Ok(None) => panic!("socket closed without a close frame; frames: {seen:#?}"),
        }
    }
}

/// A `close` without an error: the client's clean close.
fn close_body() -> FrameBody {
    FrameBody::Close(fe2o3_amqp::types::performatives::Close { error: None })
}

/// Reads until the broker closes the socket; a frame other than `close` is a failure.
async fn wait_for_socket_close(transport: &mut Transport<TcpStream, Frame>, deadline: Instant) {
    loop {
        match timeout_at(deadline, transport.next()).await {
            Err(_) => panic!("the socket stayed open after the close"),
            Ok(Some(Ok(Frame {
                body: FrameBody::Close(_),
                ..
            }))) => continue,
            Ok(Some(Ok(frame))) => panic!("a frame after the close: {:?}", frame.body),
            Ok(Some(Err(_)) | None) => return,
        }
    }
}

/// A frame body that starts with an invalid format code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_frame_after_open_closes_with_an_error() {
    malformed_frame_after_open(frame_after_size(&[0xee; 24])).await;
}

/// A described body whose descriptor is no performative (`0x00 0x53 0x30`, list0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_with_an_unknown_performative_closes_with_an_error() {
    malformed_frame_after_open(frame_after_size(&[0x00, 0x53, 0x30, 0x45])).await;
}

/// A `flow` whose list8 header announces 16 bytes and 5 items, and nothing follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_performative_with_missing_fields_closes_with_an_error() {
    malformed_frame_after_open(frame_after_size(&[0x00, 0x53, 0x13, 0xc0, 0x10, 0x05])).await;
}

/// An `open` whose container-id (str8 of 32 bytes) runs past the end of the frame.
///
/// Broker bug: fe2o3-amqp reports the short read as `transport::Error::Io(UnexpectedEof)`,
/// which the connection takes for a lost socket: it closes without a `close` frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_running_past_the_frame_end_closes_with_an_error() {
    malformed_frame_after_open(frame_after_size(&[
        0x00, 0x53, 0x10, 0xc0, 0x10, 0x01, 0xa1, 0x20, b'a', b'b',
    ]))
    .await;
}

/// A frame whose size (6) is below the 8-byte frame header (AMQP 1.0 §2.3.1: malformed).
///
/// Broker bug: fe2o3-amqp's frame decoder panics on it (`advance out of bounds`) inside the
/// connection task, so no `close` is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_shorter_than_its_header_closes_with_an_error() {
    malformed_frame_after_open(vec![2u8, 0]).await;
}

/// A client holds a lock, then sends a malformed `frame`: the broker drops the connection,
/// but the lock outlives it, as in Service Bus (design.md §4): another receiver gets the
/// message only once the lock has expired, counted once more.
async fn malformed_frame_leaves_the_locks_to_expire(frame: Vec<u8>) {
    let broker = broker(&["q"], |config| {
        config.queues[0].lock_duration = std::time::Duration::from_secs(2);
    })
    .await;
    let mut doomed = RawClient::connect(broker.addr, 65536).await;
    let to_q = doomed.attach_sender(0, "q").await;
    let sent = doomed.send_message(to_q, message("held", 100)).await;
    let outcome = doomed.send_outcome(sent).await;
    assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    let from_q = doomed
        .attach_receiver(1, "q", ReceiverSettleMode::Second)
        .await;
    doomed.flow(1, 0, 5, false).await;
    let (transfer, payload) = doomed.delivery(from_q).await;
    peek_locked(&transfer);
    let locked_until = locked_until_ms(&payload);

    let mut transport = write_raw(doomed, frame).await;
    wait_for_socket_close(&mut transport, Instant::now() + DEADLINE).await;

    let mut patient = RawClient::connect(broker.addr, 65536).await;
    let link = patient
        .attach_receiver(0, "q", ReceiverSettleMode::Second)
        .await;
    patient.flow(0, 0, 1, false).await;
    let (transfer, payload) = patient.delivery(link).await;
    let received_ms = crate::support::now_ms();
    peek_locked(&transfer);
    assert!(
        received_ms >= locked_until,
        "received at {received_ms}, before the lock ran out at {locked_until}"
    );
    assert_eq!(
        id_and_count(&payload),
        ("held".to_string(), 1),
        "the expired lock counts a delivery"
    );
    broker.stop().await;
}

/// `x-opt-locked-until` of a delivered message, in ms since the Unix epoch.
fn locked_until_ms(payload: &Bytes) -> i64 {
    let message = decode(payload);
    let annotations = message.message_annotations.expect("annotations");
    let key = fe2o3_amqp::types::messaging::annotations::OwnedKey::from(Symbol::from(
        "x-opt-locked-until",
    ));
    match annotations.0.get(&key) {
        Some(Value::Timestamp(at)) => at.milliseconds(),
        other => panic!("x-opt-locked-until is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_frame_leaves_the_connections_locks_to_expire() {
    malformed_frame_leaves_the_locks_to_expire(frame_after_size(&[0xee; 24])).await;
}

/// A frame shorter than its header once panicked inside fe2o3-amqp's decoder, which skipped
/// the connection's teardown; now it is a framing error like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_shorter_than_its_header_leaves_the_connections_locks_to_expire() {
    malformed_frame_leaves_the_locks_to_expire(vec![2u8, 0]).await;
}
