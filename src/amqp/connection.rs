//! One client connection: `open`/`close`, idle timeout and heartbeats, the channel table of
//! sessions, and the routing of entity events to the session that owns the link.
//!
//! The connection task reads frames and entity events; a separate writer task owns the write
//! half, so two-way bulk traffic cannot deadlock on full socket buffers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::transport::{Error as TransportError, Transport};
use fe2o3_amqp::types::definitions::{self, AmqpError, ConnectionError};
use fe2o3_amqp::types::performatives::{ChannelMax, Close, MaxFrameSize, Open};
use futures_util::stream::SplitSink;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::amqp::header;
use crate::amqp::link::amqp_error;
use crate::amqp::session::{Context, Fault, Outbox, Session};
use crate::entity::handle::{EntityEvent, EventSink};
use crate::entity::registry::Registry;

/// How long a client may take from TCP connect to its `open`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Highest channel number a client may use.
const CHANNEL_MAX: u16 = 1023;
/// Largest frame the broker writes, whatever the client allows.
const WRITE_FRAME_CAP: u32 = 1024 * 1024;
/// Entity events handled before the connection looks at the socket again.
const EVENT_BATCH: usize = 256;
/// Frames already received that are handled in one turn.
const FRAME_BATCH: usize = 64;

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
    /// Source of broker-wide unique link ids.
    pub next_link_id: AtomicU64,
}

/// Serves one client until it closes, fails, or the broker shuts down. With `refuse` set, the
/// client gets its `open` answered and then a `close` carrying that error.
pub async fn serve(
    stream: TcpStream,
    shared: Arc<Shared>,
    refuse: Option<definitions::Error>,
    shutdown: CancellationToken,
) {
    let transport = match open_connection(stream, &shared).await {
        Ok(opened) => opened,
        Err(reason) => {
            tracing::info!(%reason, "connection not opened");
            return;
        }
    };
    let (mut transport, remote_idle, remote_max_frame) = transport;
    if let Some(error) = refuse {
        tracing::warn!(condition = ?error.condition, "connection refused");
        let _ = transport
            .send(Frame::new(
                0u16,
                FrameBody::Close(Close { error: Some(error) }),
            ))
            .await;
        return;
    }
    let (sink, stream) = transport.split();
    let (batches, batches_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_frames(sink, batches_rx));
    let (events, events_rx) = mpsc::unbounded_channel();
    let mut connection = Connection {
        shared,
        writer: batches,
        pending: Vec::new(),
        events,
        remote_max_frame,
        sessions: HashMap::new(),
        link_sessions: HashMap::new(),
        ended_by_client: HashSet::new(),
    };
    connection
        .run(stream, events_rx, remote_idle, shutdown)
        .await;
    connection.teardown().await;
    drop(connection);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    tracing::debug!("connection closed");
}

type AmqpTransport = Transport<TcpStream, fe2o3_amqp::frames::amqp::Frame>;

/// Header exchange, SASL and the `open` exchange. Returns the transport with the negotiated
/// frame sizes and idle timeout applied, the client's idle timeout and its max frame size.
async fn open_connection(
    stream: TcpStream,
    shared: &Shared,
) -> Result<(AmqpTransport, Option<Duration>, usize), String> {
    let handshake = async {
        let mut transport = header::negotiate(stream).await.map_err(|e| e.to_string())?;
        transport.set_decoder_max_frame_size(shared.max_frame_size as usize);
        let open = match transport.next().await {
            Some(Ok(Frame {
                channel: 0,
                body: FrameBody::Open(open),
            })) => open,
            Some(Ok(other)) => {
                let error = amqp_error(AmqpError::IllegalState, "the first frame must be open");
                let _ = transport.send(our_open(shared)).await;
                let _ = transport
                    .send(Frame::new(
                        0u16,
                        FrameBody::Close(Close { error: Some(error) }),
                    ))
                    .await;
                return Err(format!("first frame was not open: {:?}", other.body));
            }
            Some(Err(e)) => return Err(format!("{e:?}")),
            None => return Err("closed before open".to_string()),
        };
        Ok((transport, open))
    };
    let (mut transport, open) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| "no open within the handshake timeout".to_string())??;
    transport
        .send(our_open(shared))
        .await
        .map_err(|e| format!("{e:?}"))?;
    let remote_max_frame = open.max_frame_size.0.clamp(512, WRITE_FRAME_CAP) as usize;
    transport.set_encoder_max_frame_size(remote_max_frame);
    if !shared.idle_timeout.is_zero() {
        transport.set_idle_timeout(shared.idle_timeout);
    }
    let remote_idle = open
        .idle_time_out
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(u64::from(ms)));
    tracing::debug!(container = %open.container_id, max_frame = remote_max_frame, idle = ?remote_idle, "open");
    Ok((transport, remote_idle, remote_max_frame))
}

fn our_open(shared: &Shared) -> Frame {
    // AMQP 1.0 §2.4.5: advertise half the threshold actually enforced, so a client that
    // sends its empty frames at the advertised interval never races the deadline.
    let idle_ms = u32::try_from(shared.idle_timeout.as_millis() / 2).unwrap_or(u32::MAX);
    Frame::new(
        0u16,
        FrameBody::Open(Open {
            container_id: format!("tidebus-{}", uuid::Uuid::new_v4()),
            hostname: None,
            max_frame_size: MaxFrameSize(shared.max_frame_size),
            channel_max: ChannelMax(CHANNEL_MAX),
            idle_time_out: (idle_ms > 0).then_some(idle_ms),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
    )
}

/// Writes batches of frames until the channel closes or a `close` frame went out; one socket
/// flush per burst of batches.
async fn write_frames(
    mut sink: SplitSink<AmqpTransport, Frame>,
    mut batches: mpsc::UnboundedReceiver<Vec<Frame>>,
) {
    let mut closing = false;
    while let Some(batch) = batches.recv().await {
        let mut next = Some(batch);
        while let Some(batch) = next.take() {
            for frame in batch {
                closing |= matches!(frame.body, FrameBody::Close(_));
                if sink.feed(frame).await.is_err() {
                    return;
                }
                if closing {
                    break;
                }
            }
            if !closing {
                next = batches.try_recv().ok();
            }
        }
        if sink.flush().await.is_err() || closing {
            break;
        }
    }
    let _ = sink.close().await;
}

/// The next frame. fe2o3-amqp's decoder panics on a frame shorter than its header; that panic
/// is caught here and reported as a framing error, so the connection closes properly and its
/// locks are released.
///
/// # Cancel safety
/// Cancel safe: reading a frame from the transport is.
async fn read_frame(
    stream: &mut futures_util::stream::SplitStream<AmqpTransport>,
) -> Option<Result<Frame, TransportError>> {
    match std::panic::AssertUnwindSafe(stream.next())
        .catch_unwind()
        .await
    {
        Ok(frame) => frame,
        Err(_) => Some(Err(TransportError::FramingError)),
    }
}

/// What a session needs from the connection (built from disjoint fields, so the connection
/// can lend it while a session is borrowed).
fn context<'a>(shared: &'a Shared, events: &'a EventSink, remote_max_frame: usize) -> Context<'a> {
    Context {
        registry: &shared.registry,
        events,
        max_message_size: shared.max_message_size,
        remote_max_frame,
    }
}

/// Whether the event loop goes on.
enum Running {
    Continue,
    Stop,
}

struct Connection {
    shared: Arc<Shared>,
    /// Batches of frames for the writer task.
    writer: mpsc::UnboundedSender<Vec<Frame>>,
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
}

impl Connection {
    async fn run(
        &mut self,
        mut stream: futures_util::stream::SplitStream<AmqpTransport>,
        mut events: mpsc::UnboundedReceiver<EntityEvent>,
        remote_idle: Option<Duration>,
        shutdown: CancellationToken,
    ) {
        let beat = remote_idle.map_or(Duration::from_secs(3600), |idle| idle / 2);
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
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
                    self.flush_accepted()
                }
                frame = read_frame(&mut stream) => {
                    let mut running = self.on_read(frame).await;
                    // Take what else has arrived, so its answers leave in one write.
                    for _ in 1..FRAME_BATCH {
                        let Running::Continue = running else { break };
                        match read_frame(&mut stream).now_or_never() {
                            Some(frame) => running = self.on_read(frame).await,
                            None => break,
                        }
                    }
                    running
                }
                _ = heartbeat.tick(), if remote_idle.is_some() => {
                    self.write(Frame::empty())
                }
            };
            let sent = self.send_pending();
            if let (Running::Continue, Running::Continue) = (running, sent) {
                continue;
            }
            return;
        }
    }

    async fn on_read(&mut self, frame: Option<Result<Frame, TransportError>>) -> Running {
        match frame {
            Some(Ok(frame)) => self.on_frame(frame).await,
            Some(Err(error)) => {
                self.on_transport_error(error);
                Running::Stop
            }
            None => Running::Stop,
        }
    }

    fn on_transport_error(&mut self, error: TransportError) {
        let close_with = match &error {
            TransportError::IdleTimeoutElapsed => Some(amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "idle timeout: no frame received for {:?}",
                    self.shared.idle_timeout
                ),
            )),
            TransportError::DecodeError(detail) => Some(amqp_error(
                AmqpError::DecodeError,
                format!("malformed frame: {detail}"),
            )),
            TransportError::FramingError => {
                Some(amqp_error(ConnectionError::FramingError, "malformed frame"))
            }
            TransportError::NotImplemented(detail) => {
                Some(amqp_error(AmqpError::NotImplemented, format!("{detail:?}")))
            }
            // fe2o3-amqp reports a field that runs past its frame as an unexpected EOF.
            TransportError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                Some(amqp_error(
                    AmqpError::DecodeError,
                    "a field runs past the end of its frame",
                ))
            }
            TransportError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
                Some(amqp_error(
                    ConnectionError::FramingError,
                    format!(
                        "frame larger than the max-frame-size of {} bytes",
                        self.shared.max_frame_size
                    ),
                ))
            }
            TransportError::Io(_) => None,
        };
        match close_with {
            Some(error) => {
                tracing::info!(condition = ?error.condition, description = ?error.description, "closing connection");
                self.close(Some(error));
            }
            None => tracing::debug!(?error, "connection lost"),
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
                let Some(session) = self.sessions.get_mut(&channel) else {
                    return self.fail(amqp_error(
                        AmqpError::IllegalState,
                        format!("frame on channel {channel}, which has no session"),
                    ));
                };
                let mut out = Outbox::default();
                let ctx = context(&self.shared, &self.events, self.remote_max_frame);
                let result = match body {
                    FrameBody::Attach(attach) => {
                        let id = self.shared.next_link_id.fetch_add(1, Ordering::Relaxed);
                        session
                            .on_attach(attach, id, &ctx, &mut out)
                            .map(|created| {
                                if let Some(id) = created {
                                    self.link_sessions.insert(id, channel);
                                }
                            })
                    }
                    FrameBody::Flow(flow) => session.on_flow(&flow, &mut out),
                    FrameBody::Transfer {
                        performative,
                        payload,
                    } => session.on_transfer(performative, payload, &mut out, &self.events),
                    FrameBody::Disposition(disposition) => {
                        session.on_disposition(disposition, &self.events, &mut out);
                        Ok(())
                    }
                    FrameBody::Detach(detach) => session.on_detach(&detach, &mut out).map(|gone| {
                        if let Some(id) = gone {
                            self.link_sessions.remove(&id);
                        }
                    }),
                    _ => Ok(()),
                };
                let local = session.local_channel;
                let running = self.perform(local, out).await;
                match result {
                    Ok(()) => running,
                    Err(Fault::Session(error)) => self.end_session(channel, Some(error)).await,
                    Err(Fault::Connection(error)) => self.fail(error),
                }
            }
        }
    }

    async fn on_event(&mut self, event: EntityEvent) {
        let link_id = match &event {
            EntityEvent::Delivered(delivery) => delivery.consumer.0,
            EntityEvent::Drained { consumer } | EntityEvent::Gone { consumer, .. } => consumer.0,
            EntityEvent::Sent { ticket, .. }
            | EntityEvent::Settled { ticket, .. }
            | EntityEvent::Managed { ticket, .. } => ticket.link,
        };
        let Some(session) = self
            .link_sessions
            .get(&link_id)
            .and_then(|channel| self.sessions.get_mut(channel))
        else {
            return;
        };
        let mut out = Outbox::default();
        let ctx = context(&self.shared, &self.events, self.remote_max_frame);
        match event {
            EntityEvent::Delivered(delivery) => session.on_delivery(delivery, &ctx, &mut out),
            EntityEvent::Drained { consumer } => session.on_drained(consumer, &mut out),
            EntityEvent::Gone { consumer, error } => {
                session.on_entity_gone(consumer.0, &error, &mut out)
            }
            EntityEvent::Sent { ticket, result } => session.on_sent(ticket, result, &mut out),
            EntityEvent::Managed { ticket, response } => {
                session.on_managed(ticket, response, &mut out)
            }
            EntityEvent::Settled { ticket, results } => {
                session.on_settled(ticket, results, &mut out)
            }
        }
        let local = session.local_channel;
        self.perform(local, out).await;
    }

    fn flush_accepted(&mut self) -> Running {
        for session in self.sessions.values_mut() {
            let mut out = Outbox::default();
            session.flush_accepted(&mut out);
            for body in out.frames {
                self.pending.push(Frame::new(session.local_channel, body));
            }
        }
        Running::Continue
    }

    /// Sends an outbox's frames on `local` and posts its commands (waiting for mailbox room).
    async fn perform(&mut self, local: u16, out: Outbox) -> Running {
        let mut running = Running::Continue;
        for body in out.frames {
            if let Running::Stop = self.write(Frame::new(local, body)) {
                running = Running::Stop;
            }
        }
        for (entity, command) in out.posts {
            if let Err(command) = entity.post(command).await {
                tracing::debug!(entity = entity.name(), "entity is gone; command refused");
                command.refuse(&entity.refusal());
            }
        }
        running
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
        let mut out = Outbox::default();
        for id in session.end(&mut out) {
            self.link_sessions.remove(&id);
        }
        out.frames.push(Session::end_frame(error));
        self.perform(session.local_channel, out).await
    }

    /// Releases every link (the entities unlock their messages) after the connection ended.
    async fn teardown(&mut self) {
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            if let Some(mut session) = self.sessions.remove(&channel) {
                let mut out = Outbox::default();
                session.end(&mut out);
                out.frames.clear();
                self.perform(session.local_channel, out).await;
            }
        }
        self.link_sessions.clear();
    }

    fn fail(&mut self, error: definitions::Error) -> Running {
        tracing::info!(condition = ?error.condition, description = ?error.description, "closing connection on a protocol error");
        self.close(Some(error));
        Running::Stop
    }

    fn close(&mut self, error: Option<definitions::Error>) {
        self.write(Frame::new(0u16, FrameBody::Close(Close { error })));
    }

    fn write(&mut self, frame: Frame) -> Running {
        self.pending.push(frame);
        Running::Continue
    }

    /// Hands this turn's frames to the writer; `Stop` once the writer is gone.
    fn send_pending(&mut self) -> Running {
        if self.pending.is_empty() {
            return Running::Continue;
        }
        match self.writer.send(std::mem::take(&mut self.pending)) {
            Ok(()) => Running::Continue,
            Err(_) => Running::Stop,
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
