//! One client connection: `open`/`close`, idle timeout and heartbeats, the channel table of
//! sessions, and the routing of entity events to the session that owns the link.
//!
//! The connection task reads frames and entity events; a separate writer task owns the write
//! half, so two-way bulk traffic cannot deadlock on full socket buffers. What waits for the
//! writer is bounded by `connection_buffer`: when it is full the task stops reading the socket
//! and its events until there is room, and closes the connection after `write_timeout`.

use foldhash::{HashMap, HashMapExt};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::types::definitions::{self, AmqpError, ConnectionError};
use fe2o3_amqp::types::performatives::{ChannelMax, Close, MaxFrameSize, Open};
use fe2o3_amqp::types::primitives::Symbol;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::amqp::frames::{self, FrameError, FrameReader, Outbound};
use crate::amqp::handshake::{self, Authenticated};
use crate::amqp::jms;
use crate::amqp::link::{amqp_error, ReassemblyBudget};
use crate::amqp::outbox::{CbsLinks, Context, Fault, Outbox};
use crate::amqp::session::Session;
use crate::amqp::temporary::Temporaries;
use crate::amqp::transactions::Transactions;
use crate::auth::access::Access;
use crate::auth::Policies;
use crate::clock;
use crate::entity::handle::{
    Command, ConsumerId, EntityError, EntityEvent, EntityHandle, EventSink, Ticket, Work,
};
use crate::entity::registry::Registry;

/// Highest channel number a client may use.
const CHANNEL_MAX: u16 = 1023;
/// Largest frame the broker writes, whatever the client allows.
const WRITE_FRAME_CAP: u32 = 1024 * 1024;
/// Entity events handled before the connection looks at the socket again.
const EVENT_BATCH: usize = 256;
/// Frames already received that are handled in one turn.
const FRAME_BATCH: usize = 64;
/// Unfinished multi-frame deliveries one connection may hold, in units of max_message_size.
const REASSEMBLY_MESSAGES: u64 = 4;
/// What the messages a connection's open transactions staged may hold together, in messages of
/// `max_message_size`.
const STAGED_MESSAGES: u64 = 16;
/// Most management requests one connection has at entities at once; more wait their turn.
const MAX_REQUESTS_IN_FLIGHT: usize = 8;
/// The longest a connection's timer waits before it looks at its tokens again.
const LONGEST_TIMER: Duration = Duration::from_secs(24 * 3600);
/// How long a `detach`, `end` or `close` waits for the settlements received before it.
const SETTLE_BARRIER_TIMEOUT: Duration = Duration::from_secs(30);
/// What a frame takes in the write buffer besides its payload: the frame header and an
/// everyday performative (an attach or an open may take more; the buffer grows for those).
const FRAME_ROOM: usize = 64;
/// The most frames and commands whose room a connection keeps from one turn for the next.
const SPARE_ROOM: usize = 64;
/// The connection capability saying that a message's `x-opt-delivery-time` delays it (a
/// scheduled enqueue): Qpid JMS's delivery delay needs the peer to offer it.
const DELAYED_DELIVERY: &str = "DELAYED_DELIVERY";

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// Entity lookup.
    pub registry: Arc<Registry>,
    /// Largest frame the broker accepts.
    pub max_frame_size: u32,
    /// Idle timeout the broker advertises and enforces.
    pub idle_timeout: Duration,
    /// Largest message the broker accepts.
    pub max_message_size: u64,
    /// How long a client may take from TCP connect to its `open`.
    pub handshake_timeout: Duration,
    /// Bytes queued toward one client before the broker stops reading it.
    pub connection_buffer: usize,
    /// How long the queue toward a client may stay full before the connection is closed.
    pub write_timeout: Duration,
    /// Message bytes a consumer may have on their way from its entity to the socket.
    pub consumer_window: u64,
    /// Most links one connection may hold; more attaches are refused.
    pub max_links_per_connection: usize,
    /// How long a transaction may run before it is rolled back.
    pub transaction_timeout: Duration,
    /// Source of broker-wide unique link ids.
    pub next_link_id: AtomicU64,
    /// The shared access policies credentials are checked against.
    pub policies: Arc<Policies>,
    /// The links of the JMS subscriptions, on every connection.
    pub jms: jms::Links,
}

/// Serves one client, over the two halves of its stream, until it closes, fails, or the
/// broker shuts down. Its protocol header, SASL and `open` must arrive by `handshake_deadline`.
/// With `refuse` set, the client gets its `open` answered and then a `close` carrying that
/// error.
pub async fn serve<R, W>(
    (read, mut write): (R, W),
    shared: Arc<Shared>,
    refuse: Option<definitions::Error>,
    handshake_deadline: Instant,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut reader = FrameReader::new(read);
    let container_id = format!("tidebus-{}", uuid::Uuid::new_v4());
    let handshake = open_connection(&mut reader, &mut write, (&shared, &container_id));
    let (remote_idle, remote_max_frame, authenticated, client) = match tokio::time::timeout_at(
        handshake_deadline,
        handshake,
    )
    .await
    {
        Ok(Ok(opened)) => opened,
        Ok(Err(reason)) => {
            tracing::info!(%reason, "connection not opened");
            return;
        }
        Err(_) => {
            tracing::info!(timeout = ?shared.handshake_timeout, "connection not opened: no open within the handshake timeout");
            return;
        }
    };
    if let Some(error) = refuse {
        tracing::warn!(condition = ?error.condition, "connection refused");
        let _ = write_frame(&mut write, close_frame(Some(error))).await;
        return;
    }
    let (outbound, writer) = Outbound::spawn(write, shared.connection_buffer);
    let (events, events_rx) = mpsc::unbounded_channel();
    let reassembly =
        ReassemblyBudget::new(shared.max_message_size.saturating_mul(REASSEMBLY_MESSAGES));
    let policy = authenticated
        .principal
        .as_ref()
        .map_or("", |principal| principal.policy.as_str());
    tracing::info!(
        mechanism = authenticated.mechanism,
        policy,
        "connection opened"
    );
    let opened_at = Instant::now();
    let access = Access::new(shared.policies.clone(), authenticated.principal);
    let transactions = Transactions::new(
        shared.transaction_timeout,
        shared.max_message_size.saturating_mul(STAGED_MESSAGES),
    );
    let mut connection = Connection {
        container_id,
        client,
        jms_ties: HashMap::new(),
        access,
        shared,
        outbound,
        pending: Vec::new(),
        events,
        remote_max_frame,
        sessions: HashMap::new(),
        link_sessions: HashMap::new(),
        ended_by_client: HashSet::new(),
        reassembly,
        forwarded: HashMap::new(),
        unanswered_settlements: 0,
        held: None,
        spare: Outbox::default(),
        transactions,
        gathered: None,
        temporaries: Temporaries::default(),
    };
    connection
        .run(reader, events_rx, remote_idle, shutdown)
        .await;
    connection.teardown().await;
    drop(connection);
    // The writer delivers what is buffered, the last `close` included; a client that does not
    // read gets a few seconds, then its socket is dropped with whatever is left.
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .is_err()
    {
        abort.abort();
        tracing::debug!("unwritten frames dropped: the client did not read them");
    }
    tracing::info!(lasted = ?opened_at.elapsed(), "connection closed");
}

/// What the handshake learnt: the client's idle timeout, its max frame size, who SASL says it
/// is, and what its `open` says for JMS.
type Opened = (Option<Duration>, usize, Authenticated, jms::Client);

/// Header exchange, SASL and the `open` exchange. The reader then accepts frames up to the
/// broker's max frame size.
async fn open_connection<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut FrameReader<R>,
    writer: &mut W,
    (shared, container_id): (&Shared, &str),
) -> Result<Opened, String> {
    let authenticated = handshake::negotiate(reader, writer, &shared.policies)
        .await
        .map_err(|e| e.to_string())?;
    reader.set_max_frame_size(shared.max_frame_size as usize);
    let first = match reader.frame().await {
        Ok(Some(raw)) => frames::decode_amqp(raw),
        Ok(None) => return Err("closed before open".to_string()),
        Err(error) => Err(error),
    };
    let open = match first {
        Ok(Frame {
            channel: 0,
            body: FrameBody::Open(open),
        }) => open,
        other => {
            let reason = match other {
                Ok(frame) => format!("the first frame must be open, not {:?}", frame.body),
                Err(error) => format!("the first frame must be open: {error}"),
            };
            let error = amqp_error(AmqpError::IllegalState, reason.clone());
            let _ = write_frame(writer, our_open(shared, container_id)).await;
            let _ = write_frame(writer, close_frame(Some(error))).await;
            return Err(reason);
        }
    };
    write_frame(writer, our_open(shared, container_id))
        .await
        .map_err(|e| e.to_string())?;
    let remote_max_frame = open.max_frame_size.0.clamp(512, WRITE_FRAME_CAP) as usize;
    let remote_idle = open
        .idle_time_out
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(u64::from(ms)));
    tracing::Span::current().record("container", open.container_id.as_str());
    tracing::debug!(max_frame = remote_max_frame, idle = ?remote_idle, "open");
    Ok((
        remote_idle,
        remote_max_frame,
        authenticated,
        jms::Client::of(&open),
    ))
}

/// Writes one frame straight to the socket (before the writer task exists).
async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, frame: Frame) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    frames::encode_amqp(frame, &mut out).map_err(std::io::Error::other)?;
    writer.write_all(&out).await
}

/// Posts `command` to `entity`; refused (and answered so) when the entity is gone.
async fn post(entity: &EntityHandle, command: Command) {
    if let Err(command) = entity.post(command).await {
        tracing::debug!(entity = entity.name(), "entity is gone; command refused");
        command.refuse(&entity.refusal());
    }
}

/// Whether a command may be gathered with others of its turn: a send, or a settlement the
/// client settled itself (one it waits for, or one in a transaction, is posted at once).
fn gathers(command: &Command) -> bool {
    matches!(
        command,
        Command::Send { .. }
            | Command::Settle {
                reply: Some(_),
                awaited: false,
                ..
            }
    )
}

/// Joins `command` to the `gathered` command of the same entity when both are sends, or both
/// settlements of one consumer; else gives it back.
fn join(gathered: &mut Command, command: Command) -> Option<Command> {
    match (gathered, command) {
        (
            Command::Send { transfers, .. },
            Command::Send {
                transfers: more, ..
            },
        ) => {
            transfers.extend(more);
            None
        }
        (
            Command::Settle {
                consumer, items, ..
            },
            Command::Settle {
                consumer: other,
                items: more,
                ..
            },
        ) if *consumer == other => {
            items.extend(more);
            None
        }
        (_, command) => Some(command),
    }
}

fn close_frame(error: Option<definitions::Error>) -> Frame {
    Frame::new(0u16, FrameBody::Close(Close { error }))
}

/// The broker's `open`, naming the connection `container_id`.
fn our_open(shared: &Shared, container_id: &str) -> Frame {
    // AMQP 1.0 §2.4.5: advertise half the threshold actually enforced, so a client that
    // sends its empty frames at the advertised interval never races the deadline.
    let idle_ms = u32::try_from(shared.idle_timeout.as_millis() / 2).unwrap_or(u32::MAX);
    Frame::new(
        0u16,
        FrameBody::Open(Open {
            container_id: container_id.to_owned(),
            hostname: None,
            max_frame_size: MaxFrameSize(shared.max_frame_size),
            channel_max: ChannelMax(CHANNEL_MAX),
            idle_time_out: (idle_ms > 0).then_some(idle_ms),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: Some(
                vec![
                    Symbol::from(DELAYED_DELIVERY),
                    Symbol::from(jms::SHARED_SUBS),
                ]
                .into(),
            ),
            desired_capabilities: None,
            properties: None,
        }),
    )
}

/// The next frame, decoded once its lengths and encoding are checked.
///
/// # Cancel safety
/// Cancel safe: the reader keeps partial frames.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
) -> Result<Option<Frame>, FrameError> {
    match reader.frame().await? {
        Some(raw) => frames::decode_amqp(raw).map(Some),
        None => Ok(None),
    }
}

/// What a session needs from the connection (built from disjoint fields, so the connection
/// can lend it while a session is borrowed).
fn context<'a>(
    (shared, connection_id): (&'a Shared, &'a str),
    events: &'a EventSink,
    reassembly: &'a ReassemblyBudget,
    links: usize,
    answers_full: bool,
    (access, transactions): (&'a mut Access, &'a mut Transactions),
) -> Context<'a> {
    Context {
        access,
        transactions,
        cbs: CbsLinks::default(),
        connection_id,
        reassembly,
        links_full: links >= shared.max_links_per_connection,
        answers_full,
        registry: &shared.registry,
        events,
        max_message_size: shared.max_message_size,
        consumer_window: shared.consumer_window,
        subscription: None,
        refused: None,
    }
}

/// Whether the event loop goes on.
enum Running {
    Continue,
    Stop,
}

struct Connection {
    /// The container id of the broker's `open`: the connection's id in refusals.
    container_id: String,
    /// What the client's `open` says for JMS: its client id, what it has created.
    client: jms::Client,
    /// The links of JMS subscriptions, by link id, released when they go.
    jms_ties: HashMap<u64, jms::Tie>,
    shared: Arc<Shared>,
    /// What the client may do: its SASL principal and the tokens it put.
    access: Access,
    /// The writer task's bounded buffer.
    outbound: Outbound,
    /// Frames of the current loop turn, handed to the writer at its end.
    pending: Vec<Frame>,
    events: EventSink,
    remote_max_frame: usize,
    /// Sessions by the client's channel.
    sessions: HashMap<u16, Session>,
    /// Link id to the client channel of its session.
    link_sessions: HashMap<u64, u16>,
    /// Channels whose session the client ended and has not begun again. The Python SDK still
    /// detaches links on a channel after ending its session; those late frames are dropped
    /// rather than treated as a protocol error.
    ended_by_client: HashSet<u16>,
    /// What the connection's unfinished incoming deliveries may hold.
    reassembly: ReassemblyBudget,
    /// Delivery bytes per consumer that left their sessions this turn, reported to the
    /// entities once the write buffer has taken the turn's frames.
    forwarded: HashMap<ConsumerId, (EntityHandle, u64)>,
    /// Settlements posted to entities whose answer has not come back yet.
    unanswered_settlements: usize,
    /// A `detach`, `end` or `close` that waits until `unanswered_settlements` is zero (or its
    /// deadline passes), so that answering it tells the client its settlements are applied.
    /// No frame is read meanwhile, which keeps the client's frames in order.
    held: Option<(Frame, Instant)>,
    /// The last turn's outbox, emptied: its vectors keep their room for the next turn, so a
    /// message in steady flow allocates none of them.
    spare: Outbox,
    /// The transactions declared on this connection's coordinator links.
    transactions: Transactions,
    /// Commands of this turn gathered into one, posted when the turn ends or a command that
    /// does not join them is posted ([`Connection::gather`]).
    gathered: Option<(EntityHandle, Command)>,
    /// The temporary queues and topics the connection's links made (deleted with them).
    temporaries: Temporaries,
}

impl Connection {
    async fn run<R: AsyncRead + Unpin>(
        &mut self,
        mut reader: FrameReader<R>,
        mut events: mpsc::UnboundedReceiver<EntityEvent>,
        remote_idle: Option<Duration>,
        shutdown: CancellationToken,
    ) {
        let beat = remote_idle.map_or(Duration::from_secs(3600), |idle| idle / 2);
        let mut heartbeat = tokio::time::interval_at(Instant::now() + beat, beat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let idle = self.shared.idle_timeout;
        let mut last_read = Instant::now();
        let idle_deadline = tokio::time::sleep(idle);
        tokio::pin!(idle_deadline);
        // A controlled test clock's moves: transaction deadlines are on the broker's clock.
        let mut clock_moves = clock::moves();
        loop {
            let barrier = self.held.as_ref().map(|(_, deadline)| *deadline);
            let lapse = self.next_token_lapse();
            let txn_deadline = self.next_transaction_deadline();
            let running = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    self.close(Some(amqp_error(ConnectionError::ConnectionForced, "the broker is shutting down")));
                    Running::Stop
                }
                Some(event) = events.recv() => {
                    self.on_event(event).await;
                    for _ in 1..EVENT_BATCH {
                        match events.try_recv() {
                            Ok(event) => self.on_event(event).await,
                            Err(_) => break,
                        }
                    }
                    self.flush_accepted();
                    self.release_held(false).await
                }
                _ = tokio::time::sleep_until(barrier.unwrap_or_else(Instant::now)), if barrier.is_some() => {
                    tracing::warn!(unanswered = self.unanswered_settlements, "settlements unanswered at the barrier's deadline");
                    self.release_held(true).await
                }
                frame = read_frame(&mut reader), if self.held.is_none() => {
                    last_read = Instant::now();
                    let mut running = self.on_read(frame).await;
                    // Take what else has arrived, so its answers leave in one write.
                    for _ in 1..FRAME_BATCH {
                        if !matches!(running, Running::Continue) || self.held.is_some() {
                            break;
                        }
                        match futures_util::FutureExt::now_or_never(read_frame(&mut reader)) {
                            Some(frame) => running = self.on_read(frame).await,
                            None => break,
                        }
                    }
                    running
                }
                _ = tokio::time::sleep_until(lapse.unwrap_or_else(Instant::now)), if lapse.is_some() => {
                    self.revoke_lapsed().await
                }
                _ = tokio::time::sleep_until(txn_deadline.unwrap_or_else(Instant::now)), if txn_deadline.is_some() => {
                    self.expire_transactions().await
                }
                Ok(()) = clock_moves.changed(), if txn_deadline.is_some() => {
                    self.expire_transactions().await
                }
                _ = heartbeat.tick(), if remote_idle.is_some() => {
                    self.write(Frame::empty())
                }
                _ = &mut idle_deadline => {
                    if last_read.elapsed() >= idle {
                        self.close(Some(amqp_error(
                            AmqpError::ResourceLimitExceeded,
                            format!("idle timeout: no frame received for {idle:?}"),
                        )));
                        Running::Stop
                    } else {
                        idle_deadline.as_mut().reset(last_read + idle);
                        Running::Continue
                    }
                }
            };
            let running = match running {
                Running::Continue => self.answer_deferred().await,
                Running::Stop => Running::Stop,
            };
            self.post_gathered().await;
            let live = |link| self.link_sessions.contains_key(&link);
            self.temporaries.reap(live, &self.shared.registry).await;
            let sent = self.send_pending(&shutdown).await;
            if let (Running::Continue, Running::Continue) = (running, sent) {
                continue;
            }
            return;
        }
    }

    /// When the first token the connection holds lapses, as a timer deadline.
    /// The wait is capped (the loop asks again after it), so a token valid for centuries
    /// cannot overflow the timer.
    fn next_token_lapse(&self) -> Option<Instant> {
        let lapse_ms = self.access.next_expiry_ms()?;
        let wait = u64::try_from(lapse_ms.saturating_sub(clock::real_ms())).unwrap_or(0);
        Some(Instant::now() + Duration::from_millis(wait).min(LONGEST_TIMER))
    }

    /// When the first open transaction reaches its deadline, as a (capped) timer deadline.
    fn next_transaction_deadline(&self) -> Option<Instant> {
        let deadline_ms = self.transactions.next_deadline_ms()?;
        let wait = u64::try_from(deadline_ms.saturating_sub(clock::now_ms())).unwrap_or(0);
        Some(Instant::now() + Duration::from_millis(wait).min(LONGEST_TIMER))
    }

    /// Rolls back the transactions past their deadline, at their via entities.
    async fn expire_transactions(&mut self) -> Running {
        let mut out = std::mem::take(&mut self.spare);
        out.posts = self.transactions.expire(clock::now_ms());
        self.perform(0, out).await
    }

    /// Detaches the links that a lapsed token authorized and no other credential covers.
    async fn revoke_lapsed(&mut self) -> Running {
        let now_ms = clock::real_ms();
        self.access.forget_expired(now_ms);
        let mut running = Running::Continue;
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            let Some(session) = self.sessions.get_mut(&channel) else {
                continue;
            };
            let mut out = std::mem::take(&mut self.spare);
            session.revoke(&self.access, now_ms, &mut out);
            let local = session.local_channel;
            if let Running::Stop = self.perform(local, out).await {
                running = Running::Stop;
            }
        }
        running
    }

    async fn on_read(&mut self, frame: Result<Option<Frame>, FrameError>) -> Running {
        match frame {
            Ok(Some(frame)) if self.must_wait_for_settlements(&frame.body) => {
                tracing::debug!(
                    unanswered = self.unanswered_settlements,
                    "holding a frame until the settlements before it are applied"
                );
                self.held = Some((frame, Instant::now() + SETTLE_BARRIER_TIMEOUT));
                Running::Continue
            }
            Ok(Some(frame)) => self.on_frame(frame).await,
            Ok(None) => Running::Stop,
            Err(error) => {
                self.on_frame_error(error);
                Running::Stop
            }
        }
    }

    /// A `detach`, `end` or `close` is answered only after the settlements received before
    /// it are applied (and durable, as the durability mode says).
    fn must_wait_for_settlements(&self, body: &FrameBody) -> bool {
        self.unanswered_settlements > 0
            && matches!(
                body,
                FrameBody::Detach(_) | FrameBody::End(_) | FrameBody::Close(_)
            )
    }

    /// Handles the held frame once its settlements are answered, or when `expired`.
    async fn release_held(&mut self, expired: bool) -> Running {
        if self.unanswered_settlements > 0 && !expired {
            return Running::Continue;
        }
        match self.held.take() {
            Some((frame, _)) => self.on_frame(frame).await,
            None => Running::Continue,
        }
    }

    /// Whether the connection holds as many answers to management and CBS requests as it
    /// may: `connection_buffer` bytes waiting for the client's credit or window, or
    /// [`MAX_REQUESTS_IN_FLIGHT`] requests at entities. Requests arriving meanwhile are
    /// deferred, so a client that takes no answers holds little more than that.
    /// The `$cbs` links the connection's sessions hold open.
    fn cbs_links(&self) -> CbsLinks {
        (self.sessions.values())
            .map(Session::cbs_links)
            .fold(CbsLinks::default(), CbsLinks::and)
    }

    fn answers_full(&self) -> bool {
        let (waiting, in_flight) = self
            .sessions
            .values()
            .map(Session::answers_held)
            .fold((0, 0), |(bytes, requests), (b, r)| {
                (bytes + b, requests + r)
            });
        waiting >= self.shared.connection_buffer as u64 || in_flight >= MAX_REQUESTS_IN_FLIGHT
    }

    /// Answers deferred requests, lowest channel first, while the connection has room.
    async fn answer_deferred(&mut self) -> Running {
        loop {
            let Some(channel) = self
                .sessions
                .iter()
                .filter(|(_, session)| session.defers_requests())
                .map(|(channel, _)| *channel)
                .min()
            else {
                return Running::Continue;
            };
            if self.answers_full() {
                return Running::Continue;
            }
            let Some(session) = self.sessions.get_mut(&channel) else {
                return Running::Continue;
            };
            let mut out = std::mem::take(&mut self.spare);
            let mut ctx = context(
                (&self.shared, &self.container_id),
                &self.events,
                &self.reassembly,
                self.link_sessions.len(),
                false,
                (&mut self.access, &mut self.transactions),
            );
            session.answer_deferred(&mut ctx, &mut out);
            let local = session.local_channel;
            if let Running::Stop = self.perform(local, out).await {
                return Running::Stop;
            }
        }
    }

    fn on_frame_error(&mut self, error: FrameError) {
        let close_with = match &error {
            FrameError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!("the client closed its socket inside a frame");
                None
            }
            FrameError::Io(_) => None,
            FrameError::TooLarge { .. } | FrameError::Framing(_) => {
                Some(amqp_error(ConnectionError::FramingError, error.to_string()))
            }
            FrameError::WrongType(_) => {
                Some(amqp_error(AmqpError::NotImplemented, error.to_string()))
            }
            FrameError::Encoding(_) | FrameError::Decode(_) => {
                Some(amqp_error(AmqpError::DecodeError, error.to_string()))
            }
        };
        match close_with {
            Some(error) => {
                tracing::info!(condition = ?error.condition, description = ?error.description, "closing connection");
                self.close(Some(error));
            }
            None => tracing::debug!(%error, "connection lost"),
        }
    }

    async fn on_frame(&mut self, frame: Frame) -> Running {
        let channel = frame.channel;
        tracing::trace!(channel, body = ?frame.body, "frame in");
        match frame.body {
            FrameBody::Empty => Running::Continue,
            FrameBody::Close(close) => {
                if let Some(error) = close.error {
                    tracing::info!(?error, "client closed with an error");
                }
                self.close(None);
                Running::Stop
            }
            FrameBody::Open(_) => {
                self.fail(amqp_error(AmqpError::IllegalState, "open received twice"))
            }
            FrameBody::Begin(begin) => {
                if begin.remote_channel.is_some() {
                    return self.fail(amqp_error(
                        AmqpError::IllegalState,
                        "the broker never begins sessions",
                    ));
                }
                if self.sessions.contains_key(&channel) || channel > CHANNEL_MAX {
                    return self.fail(amqp_error(
                        AmqpError::IllegalState,
                        format!("channel {channel} is in use or above channel-max {CHANNEL_MAX}"),
                    ));
                }
                self.ended_by_client.remove(&channel);
                let local = self.free_local_channel();
                let (session, reply) =
                    Session::begin(local, channel, &begin, self.remote_max_frame);
                self.sessions.insert(channel, session);
                self.write(Frame::new(local, FrameBody::Begin(reply)))
            }
            FrameBody::End(end) => {
                if let Some(error) = end.error {
                    tracing::info!(?error, "client ended a session with an error");
                }
                self.ended_by_client.insert(channel);
                self.end_session(channel, None).await
            }
            _ if self.ended_by_client.contains(&channel) => {
                tracing::debug!(channel, "frame after the client ended the session: dropped");
                Running::Continue
            }
            body => {
                let (mut body, subscribed) = match body {
                    FrameBody::Attach(mut attach) => {
                        let subscribed = jms::prepare(
                            &mut attach,
                            &self.shared.jms,
                            (&self.shared.registry, &self.access),
                            &self.client,
                            &self.container_id,
                        )
                        .await;
                        (FrameBody::Attach(attach), subscribed)
                    }
                    body => (body, None),
                };
                let answers_full =
                    matches!(body, FrameBody::Transfer { .. }) && self.answers_full();
                let cbs = match &body {
                    FrameBody::Attach(_) => self.cbs_links(),
                    _ => CbsLinks::default(),
                };
                let Some(session) = self.sessions.get_mut(&channel) else {
                    return self.fail(amqp_error(
                        AmqpError::IllegalState,
                        format!("frame on channel {channel}, which has no session"),
                    ));
                };
                let refused = match &mut body {
                    FrameBody::Attach(attach) => {
                        let connection = (&self.shared.registry, &self.access, &*self.container_id);
                        self.temporaries.prepare(attach, connection).await
                    }
                    _ => None,
                };
                let mut out = std::mem::take(&mut self.spare);
                let mut ctx = context(
                    (&self.shared, &self.container_id),
                    &self.events,
                    &self.reassembly,
                    self.link_sessions.len(),
                    answers_full,
                    (&mut self.access, &mut self.transactions),
                );
                ctx.cbs = cbs;
                ctx.refused = refused;
                ctx.subscription = (subscribed.as_ref())
                    .map(|tie| tie.as_ref().map(jms::Tie::path).map_err(Clone::clone));
                let mut released = None;
                let result = match body {
                    FrameBody::Attach(attach) => {
                        let id = self.shared.next_link_id.fetch_add(1, Ordering::Relaxed);
                        let created = session.on_attach(attach, id, &ctx, &mut out);
                        if let Ok(Some(id)) = created {
                            self.link_sessions.insert(id, channel);
                        }
                        self.temporaries
                            .attached(session.accepted(id).then_some(id));
                        if let Some(Ok(tie)) = subscribed {
                            match session.accepted(id) {
                                true => drop(self.jms_ties.insert(id, tie)),
                                false => released = Some((tie, false)),
                            }
                        }
                        created.map(|_| ())
                    }
                    FrameBody::Flow(flow) => session.on_flow(&flow, &mut out),
                    FrameBody::Transfer {
                        performative,
                        payload,
                    } => session.on_transfer(performative, payload, &mut out, &mut ctx),
                    FrameBody::Disposition(disposition) => {
                        session.on_disposition(
                            disposition,
                            &self.events,
                            ctx.transactions,
                            &mut out,
                        );
                        Ok(())
                    }
                    FrameBody::Detach(detach) => session.on_detach(&detach, &mut out).map(|gone| {
                        if let Some(id) = gone {
                            self.link_sessions.remove(&id);
                            out.posts
                                .extend(ctx.transactions.abandon_declared_on(&[id]));
                            released = (self.jms_ties.remove(&id)).map(|tie| (tie, detach.closed));
                        }
                    }),
                    _ => Ok(()),
                };
                let local = session.local_channel;
                let running = self.perform(local, out).await;
                if let Some((tie, closed)) = released {
                    self.shared
                        .jms
                        .release(&self.shared.registry, &tie, closed)
                        .await;
                }
                match result {
                    Ok(()) => running,
                    Err(Fault::Session(error)) => self.end_session(channel, Some(error)).await,
                    Err(Fault::Connection(error)) => self.fail(error),
                }
            }
        }
    }

    async fn on_event(&mut self, event: EntityEvent) {
        let event = match event {
            EntityEvent::Sent { results } => return self.on_sent(results).await,
            EntityEvent::Settled { .. } => {
                self.unanswered_settlements = self.unanswered_settlements.saturating_sub(1);
                event
            }
            event => event,
        };
        let link_id = match &event {
            EntityEvent::Delivered(run) => match run.first() {
                Some(delivery) => delivery.consumer.link(),
                None => return,
            },
            EntityEvent::Drained { consumer }
            | EntityEvent::Gone { consumer, .. }
            | EntityEvent::ConsumerAdded { consumer }
            | EntityEvent::SessionAccepted { consumer, .. } => consumer.link(),
            // Answers to sends may name several links: taken above.
            EntityEvent::Sent { .. } => return,
            EntityEvent::Settled { ticket, .. }
            | EntityEvent::Managed { ticket, .. }
            | EntityEvent::Discharged { ticket, .. } => ticket.link,
        };
        let Some(session) = self
            .link_sessions
            .get(&link_id)
            .and_then(|channel| self.sessions.get_mut(channel))
        else {
            return;
        };
        let mut out = std::mem::take(&mut self.spare);
        let ctx = context(
            (&self.shared, &self.container_id),
            &self.events,
            &self.reassembly,
            self.link_sessions.len(),
            false,
            (&mut self.access, &mut self.transactions),
        );
        match event {
            EntityEvent::Delivered(run) => {
                // Room for a frame each at once: growing a vector of frames step by step
                // copies them again at every step.
                out.frames.reserve(run.len());
                for delivery in run {
                    session.on_delivery(delivery, &mut out);
                }
            }
            EntityEvent::Drained { consumer } => session.on_drained(consumer, &mut out),
            EntityEvent::Gone { consumer, error } => {
                session.on_entity_gone(consumer, &error, &mut out)
            }
            EntityEvent::ConsumerAdded { consumer } => {
                session.on_consumer_added(consumer, &ctx, &mut out)
            }
            EntityEvent::SessionAccepted {
                consumer,
                session: id,
                locked_until_ms,
            } => session.on_session_accepted(consumer, &id, locked_until_ms, &ctx, &mut out),
            EntityEvent::Sent { .. } => {} // taken above
            EntityEvent::Managed { ticket, result } => session.on_managed(ticket, result, &mut out),
            EntityEvent::Settled { ticket, results } => {
                session.on_settled(ticket, results, &mut out)
            }
            EntityEvent::Discharged { ticket, result } => {
                session.on_discharged(ticket, result, &mut out)
            }
        }
        let local = session.local_channel;
        self.perform(local, out).await;
    }

    /// Takes an entity's answers to sends, each to the session of its link.
    async fn on_sent(&mut self, results: Vec<(Ticket, Result<(), EntityError>)>) {
        for (ticket, result) in results {
            let Some(session) = self
                .link_sessions
                .get(&ticket.link)
                .and_then(|channel| self.sessions.get_mut(channel))
            else {
                continue;
            };
            let mut out = std::mem::take(&mut self.spare);
            session.on_sent(ticket, result, &mut out);
            let local = session.local_channel;
            self.perform(local, out).await;
        }
    }

    fn flush_accepted(&mut self) {
        for session in self.sessions.values_mut() {
            session.flush_accepted(&mut self.spare);
            for body in self.spare.frames.drain(..) {
                self.pending.push(Frame::new(session.local_channel, body));
            }
        }
    }

    /// Sends an outbox's frames on `local` and posts its commands (waiting for mailbox room).
    async fn perform(&mut self, local: u16, mut out: Outbox) -> Running {
        for (entity, consumer, bytes) in out.forwarded.drain(..) {
            self.forwarded.entry(consumer).or_insert((entity, 0)).1 += bytes;
        }
        let mut running = Running::Continue;
        for body in out.frames.drain(..) {
            if let Running::Stop = self.write(Frame::new(local, body)) {
                running = Running::Stop;
            }
        }
        for (entity, command) in out.posts.drain(..) {
            if gathers(&command) {
                self.gather(entity, command).await;
                continue;
            }
            self.post_gathered().await;
            if let Command::Settle { reply: Some(_), .. }
            | Command::Stage {
                work: Work::Settle { .. },
                reply: Some(_),
                ..
            } = command
            {
                self.unanswered_settlements += 1;
            }
            post(&entity, command).await;
        }
        // A turn that made many frames (a large message cut into small ones) leaves no more
        // room behind than an everyday turn, so an idle connection stays small.
        if out.frames.capacity() <= SPARE_ROOM && out.posts.capacity() <= SPARE_ROOM {
            self.spare = out;
        }
        running
    }

    /// Adds a command to those gathered this turn (posting the gathered ones first when it
    /// does not join them): one command and one answer for all the sends to an entity, or all
    /// the settlements of a consumer, that come one after another in a turn. A settlement
    /// counts as unanswered from now, so a `detach` held behind it waits for its answer.
    async fn gather(&mut self, entity: EntityHandle, command: Command) {
        let command = match &mut self.gathered {
            Some((gathered_at, gathered)) if gathered_at.name() == entity.name() => {
                match join(gathered, command) {
                    None => return,
                    Some(command) => command,
                }
            }
            _ => command,
        };
        self.post_gathered().await;
        if let Command::Settle { .. } = command {
            self.unanswered_settlements += 1;
        }
        self.gathered = Some((entity, command));
    }

    /// Posts the command gathered this turn, if any.
    async fn post_gathered(&mut self) {
        if let Some((entity, command)) = self.gathered.take() {
            post(&entity, command).await;
        }
    }

    async fn end_session(&mut self, channel: u16, error: Option<definitions::Error>) -> Running {
        let Some(mut session) = self.sessions.remove(&channel) else {
            return self.fail(amqp_error(
                AmqpError::IllegalState,
                format!("end on channel {channel}, which has no session"),
            ));
        };
        if let Some(error) = &error {
            tracing::info!(channel, condition = ?error.condition, description = ?error.description, "ending session on an error");
        }
        let mut out = std::mem::take(&mut self.spare);
        let gone = session.end(&mut out);
        for id in &gone {
            self.link_sessions.remove(id);
        }
        out.posts
            .extend(self.transactions.abandon_declared_on(&gone));
        out.frames.push(Session::end_frame(error));
        let running = self.perform(session.local_channel, out).await;
        self.release_jms(&gone).await;
        running
    }

    /// Gives back the JMS subscription links among `gone` (links that went without a close
    /// of their own: a durable subscription stays).
    async fn release_jms(&mut self, gone: &[u64]) {
        for id in gone {
            if let Some(tie) = self.jms_ties.remove(id) {
                self.shared
                    .jms
                    .release(&self.shared.registry, &tie, false)
                    .await;
            }
        }
    }

    /// Releases every link (the entities unlock their messages) after the connection ended.
    async fn teardown(&mut self) {
        self.post_gathered().await;
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            if let Some(mut session) = self.sessions.remove(&channel) {
                let mut out = std::mem::take(&mut self.spare);
                session.end(&mut out);
                out.frames.clear();
                self.perform(session.local_channel, out).await;
            }
        }
        self.link_sessions.clear();
        let ties: Vec<u64> = self.jms_ties.keys().copied().collect();
        self.release_jms(&ties).await;
        self.temporaries
            .reap(|_| false, &self.shared.registry)
            .await;
        // A connection that ends rolls back what it left undischarged.
        let mut out = std::mem::take(&mut self.spare);
        out.posts = self.transactions.abandon_all();
        self.perform(0, out).await;
    }

    fn fail(&mut self, error: definitions::Error) -> Running {
        tracing::info!(condition = ?error.condition, description = ?error.description, "closing connection on a protocol error");
        self.close(Some(error));
        Running::Stop
    }

    fn close(&mut self, error: Option<definitions::Error>) {
        self.write(close_frame(error));
    }

    fn write(&mut self, frame: Frame) -> Running {
        self.pending.push(frame);
        Running::Continue
    }

    /// Hands this turn's frames to the writer, waiting for room in its buffer (the client's
    /// back-pressure). `Stop` once the writer is gone, after a `close`, or when the client has
    /// not made room for `write_timeout`.
    async fn send_pending(&mut self, shutdown: &CancellationToken) -> Running {
        if self.pending.is_empty() {
            self.report_forwarded().await;
            return Running::Continue;
        }
        // Room for every frame up front: growing the buffer frame by frame copies it each time.
        let room = self
            .pending
            .iter()
            .map(|frame| match &frame.body {
                FrameBody::Transfer { payload, .. } => FRAME_ROOM + payload.len(),
                _ => FRAME_ROOM,
            })
            .sum();
        let mut bytes = BytesMut::with_capacity(room);
        let mut closing = false;
        for frame in self.pending.drain(..) {
            closing = matches!(frame.body, FrameBody::Close(_));
            if let Err(error) = frames::encode_amqp(frame, &mut bytes) {
                tracing::error!(%error, "a frame did not encode");
            }
            if closing {
                // Nothing follows a close; dropping the drain drops the rest.
                break;
            }
        }
        if closing {
            self.outbound.send_unbudgeted(bytes.freeze());
            return Running::Stop;
        }
        let sent = tokio::select! {
            biased;
            _ = shutdown.cancelled() => Ok(false),
            sent = self.outbound.send(bytes.freeze(), self.shared.write_timeout) => sent,
        };
        match sent {
            Ok(true) => {
                self.report_forwarded().await;
                Running::Continue
            }
            Ok(false) if shutdown.is_cancelled() => {
                self.give_up(amqp_error(
                    ConnectionError::ConnectionForced,
                    "the broker is shutting down",
                ));
                Running::Stop
            }
            Ok(false) => {
                tracing::warn!(
                    buffered = self.outbound.buffered(),
                    timeout = ?self.shared.write_timeout,
                    "closing a connection that does not read what it is sent"
                );
                self.give_up(amqp_error(
                    AmqpError::ResourceLimitExceeded,
                    format!(
                        "the client read nothing for {:?} while {} bytes waited for it",
                        self.shared.write_timeout,
                        self.outbound.buffered()
                    ),
                ));
                Running::Stop
            }
            Err(_) => Running::Stop,
        }
    }

    /// Tells each entity how many bytes of its consumers' deliveries the write buffer took.
    async fn report_forwarded(&mut self) {
        for (consumer, (entity, bytes)) in std::mem::take(&mut self.forwarded) {
            // An entity that is gone has no window to open.
            let _ = entity.post(Command::Forwarded { consumer, bytes }).await;
        }
    }

    /// Sends a last `close` past the full buffer; the writer delivers it if the client ever
    /// reads again before the connection task ends.
    fn give_up(&mut self, error: definitions::Error) {
        let mut bytes = BytesMut::new();
        if frames::encode_amqp(close_frame(Some(error)), &mut bytes).is_ok() {
            self.outbound.send_unbudgeted(bytes.freeze());
        }
    }

    fn free_local_channel(&self) -> u16 {
        let used: std::collections::HashSet<u16> =
            self.sessions.values().map(|s| s.local_channel).collect();
        (0..=CHANNEL_MAX)
            .find(|c| !used.contains(c))
            .unwrap_or(CHANNEL_MAX)
    }
}
