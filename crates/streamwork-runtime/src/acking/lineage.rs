//! The lineage of a collector in a job run with acking: each buffered
//! record's root, and, for a source's collector, the trees it starts.

use std::sync::Arc;

use streamwork_core::control::Disconnected;
use streamwork_core::edge::Edge;
use streamwork_core::id::RootId;
use streamwork_core::lineage::Lineage;
use streamwork_core::record::{Data, Record};

use super::reports::{self, Anchor};
use super::trees::{FreshTree, SourceTrees};

/// The roots of a collector's buffered records.
pub struct RootedLineage<T> {
    roots: Vec<RootId>,
    /// For a source's collector: the trees of its records.
    trees: Option<Arc<SourceTrees<T>>>,
    /// A source's trees numbered since the last dispatch.
    fresh: Vec<FreshTree<T>>,
}

impl<T: Data> RootedLineage<T> {
    /// The lineage of an operator's collector: records inherit the root of
    /// the record being processed.
    pub fn inherited() -> Self {
        RootedLineage {
            roots: Vec::new(),
            trees: None,
            fresh: Vec::new(),
        }
    }

    /// The lineage of a source's collector: a new tree per record.
    pub fn source(trees: Arc<SourceTrees<T>>) -> Self {
        RootedLineage {
            roots: Vec::new(),
            trees: Some(trees),
            fresh: Vec::new(),
        }
    }
}

impl<T: Data> Lineage<T> for RootedLineage<T> {
    fn note(&mut self, records: &[Record<T>]) {
        for record in records {
            let root = match &self.trees {
                Some(trees) => {
                    // A new tree, tracked from the dispatch on. The source is
                    // done with its record once it is dispatched, which
                    // happens before this thread's reports are sent.
                    let (root, id) = (trees.next_root(), reports::new_id());
                    self.fresh.push((root, id, record.clone()));
                    reports::complete(Anchor { root, id });
                    root
                }
                None => reports::current_root(),
            };
            self.roots.push(root);
        }
    }

    fn dispatch(
        &mut self,
        records: &mut Vec<Record<T>>,
        edge: &mut dyn Edge<T>,
    ) -> Result<(), Disconnected> {
        if let Some(trees) = &self.trees {
            trees.begin_all(&mut self.fresh);
        }
        let result = edge.push_rooted(records, &mut self.roots);
        records.clear();
        self.roots.clear();
        result
    }

    fn discard(&mut self) {
        self.roots.clear();
        self.fresh.clear();
    }

    fn replays(&mut self) -> Vec<Record<T>> {
        match &self.trees {
            Some(trees) => trees.expired(),
            None => Vec::new(),
        }
    }
}
