//! The acking invariant, for any tree and any order of reports: a tree is
//! complete exactly when the last of its reports arrives, never before.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use streamwork_runtime::acking::AckTracker;

proptest! {
    #[test]
    fn a_tree_completes_exactly_at_its_last_report(
        // Children per event, breadth first: the tree's shape.
        fan_out in proptest::collection::vec(0usize..4, 1..40),
        order_seed in any::<u64>(),
        seed in any::<u64>(),
    ) {
        let mut tracker = AckTracker::new(Duration::from_secs(60), seed);
        let (root, root_id) = tracker.begin((), Instant::now());
        // Build the tree: each event is reported done with its children.
        let mut ids = vec![root_id];
        let mut reports = Vec::new();
        let mut next = 0;
        while next < ids.len() {
            let children: Vec<u64> = (0..fan_out.get(next).copied().unwrap_or(0))
                .map(|_| tracker.new_id())
                .collect();
            reports.push(children.iter().fold(ids[next], |x, c| x ^ c));
            ids.extend(children);
            next += 1;
        }
        // Deliver the reports in a shuffled order.
        let mut state = order_seed;
        for i in (1..reports.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            reports.swap(i, (state >> 33) as usize % (i + 1));
        }
        let last = reports.len() - 1;
        for (i, report) in reports.into_iter().enumerate() {
            let completed = tracker.ack(root, report).is_some();
            prop_assert_eq!(completed, i == last, "report {} of {}", i, last + 1);
        }
        prop_assert_eq!(tracker.pending(), 0);
    }
}
