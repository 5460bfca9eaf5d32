//! A browser (a receiver attached with `distribution-mode` copy: JMS's `QueueBrowser`): a
//! consumer shown pre-settled copies of the lane's messages in sequence order, as a peek shows
//! them, without locking or removing any. It keeps its place; a drain ends where the durable
//! messages do, which is how a browsing client learns it has seen them all.

use bytes::Bytes;

use super::{stamp, QueueCore, Reader};
use crate::entity::terms::{ConsumerId, Delivery, ReceiveMode};

impl QueueCore {
    /// Shows each browser that may take more what it has not seen, up to its demand.
    pub(super) fn show_to_browsers(&mut self, reader: &mut Reader) -> Vec<Delivery> {
        let browsers: Vec<ConsumerId> = (self.consumers.iter())
            .filter(|(_, state)| state.mode == ReceiveMode::Browse && !state.draining)
            .map(|(consumer, _)| *consumer)
            .collect();
        let mut out = Vec::new();
        for consumer in browsers {
            while let Some(delivery) = self.show_next(consumer, reader) {
                out.push(delivery);
            }
        }
        out
    }

    /// Shows a browser what it has not seen up to its demand, then zeroes the demand; a drain
    /// stopped by the browser's window goes on when [`QueueCore::forwarded`] says so. Returns
    /// the copies and whether the drain is finished.
    pub(super) fn drain_browser(
        &mut self,
        consumer: ConsumerId,
        reader: &mut Reader,
    ) -> (Vec<Delivery>, bool) {
        let mut out = Vec::new();
        while let Some(delivery) = self.show_next(consumer, reader) {
            out.push(delivery);
        }
        let unseen = self.unseen(consumer).is_some();
        let Some(state) = self.consumers.get_mut(&consumer) else {
            return (out, true);
        };
        if unseen && state.demand() > 0 {
            state.draining = true;
            return (out, false);
        }
        state.stop();
        state.draining = false;
        (out, true)
    }

    /// A copy of the next message the browser has not seen (and its selector selects), if
    /// it may take one. It passes the messages its selector does not select.
    fn show_next(&mut self, consumer: ConsumerId, reader: &mut Reader) -> Option<Delivery> {
        if !self.consumers.get(&consumer)?.can_take() {
            return None;
        }
        let mut seq = self.unseen(consumer)?;
        while !self.selects(consumer, seq, reader) {
            self.consumers.get_mut(&consumer)?.shown_from = seq + 1;
            seq = self.unseen(consumer)?;
        }
        let entry = self.messages.get(&seq)?;
        let (record, lock) = (entry.record, entry.lock);
        let session = self.session_of(seq);
        let state = self.consumers.get_mut(&consumer)?;
        state.shown_from = seq + 1;
        state.delivered += 1;
        state.in_flight += u64::from(record.size);
        let mut stamp = stamp(seq, &record, lock, true);
        stamp.presettled = true;
        Some(Delivery {
            consumer,
            seq,
            lock_token: None,
            record,
            session,
            bytes: Bytes::new(),
            stamp,
        })
    }

    /// The first durable message from the browser's place.
    fn unseen(&self, consumer: ConsumerId) -> Option<i64> {
        let from = self.consumers.get(&consumer)?.shown_from;
        if from >= self.visible_below {
            return None;
        }
        (self.messages.range(from..self.visible_below).next()).map(|(seq, _)| *seq)
    }
}
