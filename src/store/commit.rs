//! Group commit: one flusher per database turns many waiting writers into one flush (sled's
//! `flush()` and the sync of its files, `Store::flush_blocking`) on its own thread. sled 0.34.7's `flush_async` can deadlock when called concurrently
//! (spacejam/sled#1308), so this is the only place that flushes while the broker runs.
//!
//! A dedicated thread rather than a task that spawns a blocking job per flush: a request wakes
//! it directly, and its answer goes straight to the waiters, two thread hops fewer for a lone
//! sender waiting on its fsync.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::store::StoreError;

/// A flush request: where its result goes, and how many messages it makes durable.
pub type Waiter = (oneshot::Sender<Result<(), StoreError>>, u64);

/// A handle to the database's flusher task.
#[derive(Debug, Clone)]
pub struct Flusher {
    /// Unbounded as a channel, bounded in use: an entity asks for its next flush only after
    /// its last one was answered, and `interval` mode's ticker likewise, so at most one
    /// request per entity (plus the ticker's) waits here.
    requests: mpsc::UnboundedSender<Waiter>,
    /// The first flush failure; set once, never cleared.
    poisoned: Arc<OnceLock<StoreError>>,
}

impl Flusher {
    /// Starts the flusher thread, which makes writes durable by calling `flush` (which holds
    /// the database). It ends when every handle is dropped; the returned [`FlusherThread`]
    /// tells when it has let go of the database.
    ///
    /// # Errors
    /// [`StoreError::Sled`] when the thread cannot be started.
    pub fn start(
        flush: impl Fn() -> Result<(), StoreError> + Send + 'static,
    ) -> Result<(Flusher, FlusherThread), StoreError> {
        let (requests, rx) = mpsc::unbounded_channel();
        let poisoned = Arc::new(OnceLock::new());
        let for_thread = poisoned.clone();
        let (ended, ended_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("tidebus-flusher".into())
            .spawn(move || {
                run(&flush, rx, &for_thread);
                drop(flush);
                drop(ended);
            })
            .map_err(|e| StoreError::Sled(format!("cannot start the flusher thread: {e}")))?;
        Ok((Flusher { requests, poisoned }, FlusherThread(ended_rx)))
    }

    /// A flusher that never flushes: every request waits for ever (for the tests of what
    /// waits for a flush).
    #[cfg(test)]
    pub fn stalled() -> Flusher {
        let (flusher, never_served) = Flusher::answered_by_test();
        std::mem::forget(never_served);
        flusher
    }

    /// A flusher whose requests the test answers itself: each arrives on the returned
    /// channel, as the result's sender and the messages it covers.
    #[cfg(test)]
    pub fn answered_by_test() -> (Flusher, mpsc::UnboundedReceiver<Waiter>) {
        let (requests, received) = mpsc::unbounded_channel();
        let flusher = Flusher {
            requests,
            poisoned: Arc::new(OnceLock::new()),
        };
        (flusher, received)
    }

    /// The failure that poisoned the database, if a flush ever failed.
    pub fn poisoned(&self) -> Option<&StoreError> {
        self.poisoned.get()
    }

    /// Asks for a flush that covers every write made before this call, among them
    /// `messages` new messages (for the flush metrics). The answer arrives on the returned
    /// channel; several requests share one flush.
    pub fn request(&self, messages: u64) -> oneshot::Receiver<Result<(), StoreError>> {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError((tx, _))) = self.requests.send((tx, messages)) {
            let _ = tx.send(Err(StoreError::Sled("the flusher has stopped".into())));
        }
        rx
    }
}

/// The end of a flusher thread, to wait for: the database stays open (and locked against
/// another process or a restarted broker) until the thread has let go of it.
#[derive(Debug)]
pub struct FlusherThread(std::sync::mpsc::Receiver<()>);

impl FlusherThread {
    /// Waits up to `timeout` for the thread to end, which it does once every [`Flusher`]
    /// handle is dropped; whether it ended.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        matches!(
            self.0.recv_timeout(timeout),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        )
    }
}

fn run(
    flush: &dyn Fn() -> Result<(), StoreError>,
    mut requests: mpsc::UnboundedReceiver<Waiter>,
    poisoned: &OnceLock<StoreError>,
) {
    // After a failed flush every later request fails too: sled's state is unknown, and
    // retrying an fsync can report success for data that never reached the disk.
    let mut waiters = Vec::new();
    while let Some(first) = requests.blocking_recv() {
        waiters.push(first);
        while let Ok(more) = requests.try_recv() {
            waiters.push(more);
        }
        let started = Instant::now();
        let result = match poisoned.get() {
            Some(error) => Err(error.clone()),
            None => flush(),
        };
        let metrics = crate::metrics::broker();
        metrics
            .flush_seconds
            .observe(started.elapsed().as_secs_f64());
        let messages: u64 = waiters.iter().map(|(_, messages)| messages).sum();
        metrics.flush_messages.observe(messages as f64);
        if let Err(error) = &result {
            if poisoned.set(error.clone()).is_ok() {
                metrics.storage_errors.inc();
                tracing::error!(%error, "flush failed: the store stops acknowledging writes");
            }
        }
        for (waiter, _) in waiters.drain(..) {
            let _ = waiter.send(result.clone());
        }
    }
}

/// `interval` mode: flushes every `period` until shutdown, then once more.
pub async fn flush_every(
    flusher: Flusher,
    period: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if flusher.request(0).await.is_err() {
            break;
        }
    }
    let _ = flusher.request(0).await;
}
