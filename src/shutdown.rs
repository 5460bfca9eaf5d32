//! One shutdown signal for every task, and a tracker to wait for them with a deadline.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The broker's tasks and the token that tells them to stop.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// Cancelled once, when the broker stops.
    pub token: CancellationToken,
    /// Every connection and entity task.
    pub tracker: TaskTracker,
}

impl Shutdown {
    /// Signals every task, then waits until all have finished or `deadline` passed.
    /// Returns whether every task finished in time.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        tokio::time::timeout(deadline, self.tracker.wait())
            .await
            .is_ok()
    }
}
