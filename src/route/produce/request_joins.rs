//! Batches of one Produce request joined into one batch per partition ([`crate::route::join`]).
//!
//! While a request is planned ([`super::sequenced`]), a batch beyond the chosen broker's free
//! partitions is numbered right behind a batch of the same request there (its *head*). Once
//! every entry of the topic is placed, each head's entry in its part is replaced by the joined
//! batch: the number stage for batches joined within a request, before the parts are queued.

use bytes::Bytes;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::produce_request::TopicProduceData;

use super::answers::Numbered;
use super::merge::Route;
use super::number;
use crate::route::Context;
use crate::route::producers::{LinkKey, ProducerState};
use crate::route::sequence::code;

/// Batches of one request going out as one joined batch ([`crate::route::join`]): the head
/// (numbered fresh, in part `part` as partition `target`, its route at index `route`) and the
/// batches numbered right behind it.
pub(super) struct PlanJoin {
    pub(super) part: usize,
    pub(super) route: usize,
    pub(super) target: i32,
    pub(super) seq: i32,
    pub(super) epoch: i16,
    pub(super) topic_key: Bytes,
    pub(super) records: Vec<Bytes>,
}

impl PlanJoin {
    /// Puts the joined batch in place of the head's in its part, and reports the head's
    /// offsets unknown like its followers'.
    pub(super) fn finish(
        self,
        ctx: &dyn Context,
        state: &mut ProducerState,
        topic: &TopicName,
        (destinations, numbered): (&mut [(LinkKey, Vec<TopicProduceData>)], &mut Vec<Numbered>),
        routes: &mut [Route],
    ) {
        let parts: Vec<&Bytes> = self.records.iter().collect();
        let joined = number::joined(state, self.epoch, self.seq, &parts);
        let entry = destinations
            .get_mut(self.part)
            .and_then(|(_, data)| data.iter_mut().find(|t| t.name == *topic))
            .and_then(|t| t.partition_data.iter_mut().find(|p| p.index == self.target));
        let (Some(joined), Some(entry)) = (joined, entry) else {
            self.give_back(state, topic, (destinations, numbered), routes);
            return;
        };
        entry.records = Some(joined.clone());
        if let Some(route) = routes.get_mut(self.route) {
            route.for_each_mut(&mut |route| {
                if let Route::Part {
                    part,
                    partition,
                    moved,
                } = route
                    && *part == self.part
                    && *partition == self.target
                {
                    *moved = true;
                }
            });
        }
        state
            .sequences
            .set_joined(&self.topic_key, self.target, self.epoch, self.seq, &joined);
        let followers = self.records.len() as u64 - 1;
        ctx.metrics().sequencing.joined.increment(followers);
    }

    /// Takes the joined batch out of its part when it could not be built. Cannot happen (each
    /// batch was joined on trial with the head first). If it did, nothing of it is sent and
    /// each batch is answered "not now": as for a refused joined batch, the lane takes the
    /// numbers back and each is retried alone.
    fn give_back(
        self,
        state: &mut ProducerState,
        topic: &TopicName,
        (destinations, numbered): (&mut [(LinkKey, Vec<TopicProduceData>)], &mut Vec<Numbered>),
        routes: &mut [Route],
    ) {
        let sequences = &mut state.sequences;
        for route in routes.iter_mut() {
            route.for_each_mut(&mut |route| {
                if matches!(route, Route::Part { part, partition, moved: true }
                    if *part == self.part && *partition == self.target)
                {
                    *route = Route::Local {
                        error: code::REQUEST_TIMED_OUT,
                    };
                }
            });
        }
        sequences.set_joined(
            &self.topic_key,
            self.target,
            self.epoch,
            self.seq,
            &Bytes::new(),
        );
        let (mine, others): (Vec<Numbered>, Vec<Numbered>) = std::mem::take(numbered)
            .into_iter()
            .partition(|n| n.topic == *topic && n.target == self.target);
        *numbered = others;
        for n in mine {
            sequences.resolve(&n.key, n.target, n.seq, code::INVALID_RECORD);
        }
        if let Some(r) = routes.get_mut(self.route) {
            *r = Route::Local {
                error: code::REQUEST_TIMED_OUT,
            };
        }
        if let Some((_, data)) = destinations.get_mut(self.part) {
            for t in data.iter_mut().filter(|t| t.name == *topic) {
                t.partition_data.retain(|p| p.index != self.target);
            }
        }
    }
}
