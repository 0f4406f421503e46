//! Successes a client must not hear yet.
//!
//! A broker appends an idempotent producer's batches of a partition only in sequence order, so
//! a client may take a later batch's success as proof that every earlier batch of that
//! partition is appended too. librdkafka does: when a batch succeeds while earlier messages of
//! its partition wait for a retry, it reports them delivered without sending them again (its
//! "implicit ack", `rd_kafka_dr_implicit_ack`). Through kroute the proof does not hold: the
//! earlier batch went to its own lane, and may have failed there while the later one was
//! appended on another. So while an earlier batch of the client's partition waits for the
//! client's retry, a later batch's success reaches the client as a retriable error. kroute
//! keeps that batch as appended (and does not forget it), so the client's retry of it is
//! answered from memory once the earlier batch is in, and nothing is appended twice.

use super::{BatchKey, Producer, State, after};

impl Producer {
    /// Whether the success of batch `key` must reach its client as a retriable error for now:
    /// an earlier batch of its client partition, in the same epoch, was answered with an error
    /// and is not known appended since (the client is to retry it), or was seen and not
    /// numbered. The batch is then remembered until its retry is answered.
    pub fn withholds_success(&mut self, key: &BatchKey) -> bool {
        let Some(client) = self.clients.get_mut(&(key.topic.clone(), key.partition)) else {
            return false;
        };
        if client.epoch != key.epoch {
            return false;
        }
        let earlier = |base: i32| after(key.base, base);
        let unnumbered = client.unnumbered.iter().any(|b| earlier(*b));
        let to_retry = client.recent.iter().any(|a| {
            a.epoch == key.epoch
                && matches!(a.state, State::Pending | State::Retry)
                && earlier(a.base)
        });
        if !(unnumbered || to_retry) {
            return false;
        }
        if let Some(a) = client.recent.iter_mut().find(|a| a.is(key)) {
            a.owes_answer = true;
        }
        true
    }

    /// Notes that the client hears an error for a batch of which `key` is a part the broker
    /// appended: a divided batch whose moved part failed is answered with that part's error,
    /// and the client retries the whole batch. That part must then be kept until its retry is
    /// answered from memory, as a withheld success is: forgotten (a client partition keeps
    /// its last 16 batches, and an appended one that owes nothing goes first), the retry would
    /// be numbered afresh and its records appended twice.
    pub fn owes_retry_answer(&mut self, key: &BatchKey) {
        self.set_owed(key, true);
    }

    /// Notes that the client is told its batch `key` (or the batch `key` is a part of)
    /// succeeded: an appended batch owes it nothing more, and may be forgotten.
    pub fn answered(&mut self, key: &BatchKey) {
        self.set_owed(key, false);
    }

    fn set_owed(&mut self, key: &BatchKey, owed: bool) {
        let Some(client) = self.clients.get_mut(&(key.topic.clone(), key.partition)) else {
            return;
        };
        if let Some(a) = client
            .recent
            .iter_mut()
            .find(|a| a.is(key) && a.state == State::Acked)
        {
            a.owes_answer = owed;
        }
    }
}
