//! Fan-out: one output channel read by several components.
//!
//! A collector hands each batch to one edge; when several components read
//! the channel, that edge is a [`FanOut`] of theirs: every edge but the last
//! gets a copy of the batch (and, with acking, of its roots), the last the
//! batch itself. A failing edge does not keep the batch from the others;
//! the first failure is what the collector is told.

use streamwork_core::control::{Control, Disconnected};
use streamwork_core::edge::Edge;
use streamwork_core::id::RootId;
use streamwork_core::record::{Data, Record};
use streamwork_core::time::Timestamp;

/// The edges of one channel, as one.
pub(crate) struct FanOut<T> {
    edges: Vec<Box<dyn Edge<T>>>,
}

impl<T: Data> FanOut<T> {
    /// The edges of one channel (at least two), as one.
    pub(crate) fn new(edges: Vec<Box<dyn Edge<T>>>) -> Self {
        debug_assert!(edges.len() > 1, "a channel with one edge needs no fan-out");
        FanOut { edges }
    }

    /// Runs `step` on every edge, and returns the first failure.
    fn each(
        &mut self,
        mut step: impl FnMut(&mut dyn Edge<T>) -> Result<(), Disconnected>,
    ) -> Result<(), Disconnected> {
        let mut result = Ok(());
        for edge in &mut self.edges {
            if let Err(e) = step(edge.as_mut()) {
                result = result.and(Err(e));
            }
        }
        result
    }
}

impl<T: Data> Edge<T> for FanOut<T> {
    fn open(&mut self) -> Result<(), Disconnected> {
        self.each(|edge| edge.open())
    }

    fn push(&mut self, records: &mut Vec<Record<T>>) -> Result<(), Disconnected> {
        let last = self.edges.len() - 1;
        let mut result = Ok(());
        for edge in &mut self.edges[..last] {
            if let Err(e) = edge.push(&mut records.clone()) {
                result = result.and(Err(e));
            }
        }
        result.and(self.edges[last].push(records))
    }

    fn push_rooted(
        &mut self,
        records: &mut Vec<Record<T>>,
        roots: &mut Vec<RootId>,
    ) -> Result<(), Disconnected> {
        let last = self.edges.len() - 1;
        let mut result = Ok(());
        for edge in &mut self.edges[..last] {
            let (mut copy, mut copied_roots) = (records.clone(), roots.clone());
            if let Err(e) = edge.push_rooted(&mut copy, &mut copied_roots) {
                result = result.and(Err(e));
            }
        }
        result.and(self.edges[last].push_rooted(records, roots))
    }

    fn flush(&mut self) -> Result<(), Disconnected> {
        self.each(|edge| edge.flush())
    }

    fn control(&mut self, control: &Control) -> Result<(), Disconnected> {
        self.each(|edge| edge.control(control))
    }

    fn on_processing_time(&mut self, now: Timestamp) -> Result<(), Disconnected> {
        self.each(|edge| edge.on_processing_time(now))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    type Batch = Vec<Record<u32>>;

    /// Keeps what it is given; fails every push when `broken`.
    struct Kept {
        records: Arc<Mutex<Vec<u32>>>,
        roots: Arc<Mutex<usize>>,
        broken: bool,
    }

    impl Edge<u32> for Kept {
        fn push(&mut self, records: &mut Batch) -> Result<(), Disconnected> {
            if self.broken {
                return Err(Disconnected);
            }
            self.records
                .lock()
                .unwrap()
                .extend(records.drain(..).map(|r| r.value));
            Ok(())
        }
        fn push_rooted(
            &mut self,
            batch: &mut Batch,
            roots: &mut Vec<RootId>,
        ) -> Result<(), Disconnected> {
            *self.roots.lock().unwrap() += roots.drain(..).count();
            self.push(batch)
        }
        fn flush(&mut self) -> Result<(), Disconnected> {
            Ok(())
        }
        fn control(&mut self, _: &Control) -> Result<(), Disconnected> {
            Ok(())
        }
    }

    type Seen = (Arc<Mutex<Vec<u32>>>, Arc<Mutex<usize>>);

    fn fan_out(broken: &[bool]) -> (FanOut<u32>, Vec<Seen>) {
        let seen: Vec<Seen> = broken.iter().map(|_| Default::default()).collect();
        let edges = broken
            .iter()
            .zip(&seen)
            .map(|(&broken, (records, roots))| {
                Box::new(Kept {
                    records: records.clone(),
                    roots: roots.clone(),
                    broken,
                }) as Box<dyn Edge<u32>>
            })
            .collect();
        (FanOut::new(edges), seen)
    }

    #[test]
    fn every_edge_gets_every_record_and_root() {
        let (mut out, seen) = fan_out(&[false, false, false]);
        let mut records: Vec<Record<u32>> = (0..4).map(Record::new).collect();
        out.push(&mut records).unwrap();
        assert!(records.is_empty(), "the last edge takes the batch itself");
        let mut roots = vec![RootId::from_raw(7); 2];
        out.push_rooted(&mut vec![Record::new(9); 2], &mut roots)
            .unwrap();
        for (records, roots) in &seen {
            assert_eq!(*records.lock().unwrap(), [0, 1, 2, 3, 9, 9]);
            assert_eq!(*roots.lock().unwrap(), 2);
        }
    }

    #[test]
    fn a_failing_edge_does_not_keep_the_batch_from_the_others() {
        let (mut out, seen) = fan_out(&[false, true, false]);
        let result = out.push(&mut (0..3).map(Record::new).collect());
        assert_eq!(result, Err(Disconnected));
        assert_eq!(*seen[0].0.lock().unwrap(), [0, 1, 2]);
        assert_eq!(*seen[2].0.lock().unwrap(), [0, 1, 2]);
    }
}
