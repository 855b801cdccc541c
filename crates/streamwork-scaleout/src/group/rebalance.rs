//! The coordinator consumer's context: rebalances start and stop
//! partition jobs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};

use super::jobs::{Shared, commit_positions};

/// The coordinator consumer's context: rebalances start and stop
/// partition jobs.
pub(super) struct GroupContext(pub(super) Arc<Shared>);

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let revoked: Vec<(String, i32)> = list
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            // Stopped (drained, final checkpoint taken) before anyone else
            // may be assigned them.
            let ended = self.0.stop(Some(&revoked));
            if let Err(error) = commit_positions(consumer, &ended, CommitMode::Sync) {
                tracing::warn!("kafka group: committing revoked partitions: {error}");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                self.0.rebalances.fetch_add(1, Ordering::Relaxed);
                if let Err(error) = consumer.pause(list) {
                    tracing::warn!("kafka group: pausing the coordinator: {error}");
                }
                if self.0.leaving.load(Ordering::Relaxed) {
                    return;
                }
                for element in list.elements() {
                    self.0.start(element.topic(), element.partition());
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => tracing::warn!("kafka group: rebalance failed: {error}"),
        }
    }
}
