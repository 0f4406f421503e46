//! The batches kroute joins into one ([`crate::route::join`]): numbering them behind the first,
//! and resending the joined batch whole when any of them is retried.
//!
//! Each member stays a client batch of its own in [`Producer`]'s memory (own key, own number)
//! and records the number its broker batch starts with; lanes count a joined batch once.

use bytes::Bytes;

use super::{Assignment, BatchKey, Producer, State, advance};

impl Producer {
    /// Whether batches of `topic` may be joined (none joined there was refused).
    pub fn joins(&self, topic: &Bytes) -> bool {
        !self.no_join.contains(topic)
    }

    /// Numbers a fresh batch right behind the batch numbered last on `target`, which starts at
    /// `batch_seq`, so that both go out as one joined batch. None if the lane numbered anything
    /// else since, the client's order does not allow it, or there is no room to remember it.
    pub fn join(&mut self, key: &BatchKey, target: i32, batch_seq: i32) -> Option<i32> {
        let tp = (key.topic.clone(), target);
        let lane = self.lanes.get(&tp)?;
        if lane.epoch != key.epoch
            || lane.numbered.back() != Some(&batch_seq)
            || !self.joins(&key.topic)
            || !self.in_client_order(key)
        {
            return None;
        }
        let seq = lane.next;
        let client = self.clients.get_mut(&(key.topic.clone(), key.partition))?;
        if client.epoch != key.epoch {
            return None;
        }
        client.make_room(key)?;
        let lane = self.lanes.get_mut(&tp)?;
        lane.next = advance(seq, key.records);
        lane.count(State::InFlight, true, 1);
        client.numbered(key, target, seq, batch_seq);
        Some(seq)
    }

    /// Remembers the joined batch starting at `batch_seq` on `target`, for resends.
    pub fn set_joined(
        &mut self,
        topic: &Bytes,
        target: i32,
        epoch: i16,
        batch_seq: i32,
        batch: &Bytes,
    ) {
        for a in self.members_mut(topic, target, epoch, batch_seq) {
            a.joined = Some(batch.clone());
        }
    }

    /// The client batches that went out in the batch starting at `batch_seq` on `target`.
    fn members_mut<'a>(
        &'a mut self,
        topic: &'a Bytes,
        target: i32,
        epoch: i16,
        batch_seq: i32,
    ) -> impl Iterator<Item = &'a mut Assignment> + 'a {
        self.clients
            .iter_mut()
            .filter(move |((t, _), _)| t == topic)
            .flat_map(|(_, c)| c.recent.iter_mut())
            .filter(move |a| a.target == target && a.epoch == epoch && a.batch_seq == batch_seq)
    }

    /// Puts the pending members of a joined batch back in flight for its resend; returns them.
    pub(super) fn resend_joined(
        &mut self,
        asking: &BatchKey,
        target: i32,
        epoch: i16,
        batch_seq: i32,
    ) -> Vec<(BatchKey, i32)> {
        let topic = &asking.topic;
        let mut members = Vec::new();
        let mut moved = 0;
        for ((t, partition), c) in self.clients.iter_mut().filter(|((t, _), _)| t == topic) {
            for a in c.recent.iter_mut() {
                if a.target == target
                    && a.epoch == epoch
                    && a.batch_seq == batch_seq
                    && a.state == State::Pending
                {
                    a.state = State::InFlight;
                    a.owes_answer = !(*partition == asking.partition && a.base == asking.base);
                    moved += 1;
                    let key = BatchKey {
                        topic: t.clone(),
                        partition: *partition,
                        epoch,
                        base: a.base,
                        records: a.records,
                        content: a.content,
                    };
                    members.push((key, a.seq));
                }
            }
        }
        if let Some(lane) = self.lanes.get_mut(&(topic.clone(), target)) {
            // (Followers stay followers: their count does not change.)
            lane.count(State::Pending, false, -moved);
            lane.count(State::InFlight, false, moved);
        }
        members.sort_by_key(|m| m.1);
        members
    }
}
