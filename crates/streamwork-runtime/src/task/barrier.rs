//! Collecting a checkpoint's barrier from every input of a task (chapter
//! 10): aligned for exactly-once (an input that delivered it is set aside
//! until every input has), merely awaited for at-least-once.

use std::time::{Duration, Instant};

use streamwork_core::CheckpointId;

/// An input of a task: its port, and the sender's index at that port.
pub(crate) type Slot = (usize, usize);

/// The checkpoint barrier a task is collecting from its inputs.
#[derive(Default)]
pub(crate) struct Barrier {
    /// Exactly-once: inputs that delivered the barrier are not read until
    /// every input has (alignment); at-least-once: they are.
    align: bool,
    /// The checkpoint whose barrier has arrived on some inputs.
    pending: Option<CheckpointId>,
    /// When its barrier first arrived: the alignment is measured from here.
    first_arrival: Option<Instant>,
    /// Aligning: the inputs that delivered it, set aside.
    held: Vec<Slot>,
    /// Not aligning: the inputs that delivered it.
    seen: Vec<Slot>,
}

impl Barrier {
    /// A barrier collector, aligning or not.
    pub(crate) fn new(align: bool) -> Self {
        Barrier {
            align,
            ..Barrier::default()
        }
    }

    /// Whether some input is set aside until the barrier completes.
    pub(crate) fn holds_inputs(&self) -> bool {
        !self.held.is_empty()
    }

    /// The barrier of `checkpoint` arrived on `active[slot]`; an aligning
    /// collector sets that input aside.
    pub(crate) fn arrived(
        &mut self,
        checkpoint: CheckpointId,
        slot: usize,
        active: &mut Vec<Slot>,
    ) {
        if self.pending.is_some_and(|p| p != checkpoint) {
            // A newer checkpoint overtook one that was abandoned: start over.
            active.append(&mut self.held);
            self.seen.clear();
            self.first_arrival = None;
        }
        self.pending = Some(checkpoint);
        self.first_arrival.get_or_insert_with(Instant::now);
        if self.align {
            self.held.push(active.remove(slot));
        } else {
            self.seen.push(active[slot]);
        }
    }

    /// Once every input that has not ended has delivered the barrier: the
    /// checkpoint to snapshot and forward now, with the time from its first
    /// arrival to its last (the alignment); the inputs set aside are read
    /// again.
    pub(crate) fn complete_if_aligned(
        &mut self,
        active: &mut Vec<Slot>,
    ) -> Option<(CheckpointId, Duration)> {
        let checkpoint = self.pending?;
        let aligned = if self.align {
            active.is_empty()
        } else {
            active.iter().all(|c| self.seen.contains(c))
        };
        if !aligned {
            return None;
        }
        self.pending = None;
        active.append(&mut self.held);
        self.seen.clear();
        let alignment = self
            .first_arrival
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        Some((checkpoint, alignment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> CheckpointId {
        CheckpointId::new(n)
    }

    /// The checkpoint whose barrier is now complete on `active`, if any.
    fn completed(barrier: &mut Barrier, active: &mut Vec<Slot>) -> Option<CheckpointId> {
        barrier.complete_if_aligned(active).map(|(id, _)| id)
    }

    #[test]
    fn aligning_sets_inputs_aside_until_every_input_delivered() {
        let mut barrier = Barrier::new(true);
        let mut active = vec![(0, 0), (0, 1), (1, 0)];
        barrier.arrived(id(1), 1, &mut active);
        assert_eq!(
            active,
            [(0, 0), (1, 0)],
            "the input that delivered it is not read"
        );
        assert_eq!(completed(&mut barrier, &mut active), None);
        barrier.arrived(id(1), 0, &mut active);
        barrier.arrived(id(1), 0, &mut active);
        assert_eq!(completed(&mut barrier, &mut active), Some(id(1)));
        active.sort();
        assert_eq!(
            active,
            [(0, 0), (0, 1), (1, 0)],
            "every input is read again"
        );
        assert!(!barrier.holds_inputs());
    }

    #[test]
    fn without_alignment_inputs_are_read_while_the_barrier_is_collected() {
        let mut barrier = Barrier::new(false);
        let mut active = vec![(0, 0), (0, 1)];
        barrier.arrived(id(4), 0, &mut active);
        assert_eq!(active.len(), 2);
        assert_eq!(completed(&mut barrier, &mut active), None);
        barrier.arrived(id(4), 1, &mut active);
        assert_eq!(completed(&mut barrier, &mut active), Some(id(4)));
    }

    #[test]
    fn an_ended_input_no_longer_holds_a_checkpoint_back() {
        let mut barrier = Barrier::new(true);
        let mut active = vec![(0, 0), (0, 1)];
        barrier.arrived(id(2), 0, &mut active);
        // The other input ends: the loop removes it from the active inputs.
        active.remove(0);
        assert_eq!(completed(&mut barrier, &mut active), Some(id(2)));
        assert_eq!(active, [(0, 0)]);
    }

    #[test]
    fn a_newer_barrier_overtaking_an_abandoned_one_starts_over() {
        let mut barrier = Barrier::new(true);
        let mut active = vec![(0, 0), (0, 1)];
        barrier.arrived(id(1), 0, &mut active);
        barrier.arrived(id(2), 0, &mut active);
        assert_eq!(
            active,
            [(0, 0)],
            "only the input that delivered the newer one waits"
        );
        assert_eq!(completed(&mut barrier, &mut active), None);
        barrier.arrived(id(2), 0, &mut active);
        assert_eq!(completed(&mut barrier, &mut active), Some(id(2)));
    }
}
