//! [`StoredState`]: keyed state that lives in the checkpoint log.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use hashbrown::hash_table::{Entry, HashTable};
use rkyv::rancor;
use streamwork_core::checkpoint::{
    CheckpointView, DeferredBytes, InputHold, SideCheck, SideRecord, SnapshotContext,
};
use streamwork_core::hash::stable_hash;
use streamwork_core::state::{CurrentKey, Key};
use streamwork_core::{CheckpointId, InstanceContext, InstanceIdx, KeyGroups, TaskError};

use super::run::{BadRun, Run, RunEntry, RunWriter, find};
use crate::error::StateError;
use crate::managed::{FieldKind, FieldRestore, FieldSnapshot, StateField};
use crate::state_data::StateData;

/// The layout version of a stored field's manifest.
const MANIFEST_SCHEMA: u32 = 1;
/// The layout version of its runs (see the `run` module).
const RUN_SCHEMA: u32 = 1;
/// A manifest's run that was written with the manifest's own checkpoint
/// (whose id the instance did not know: the final checkpoint).
const THIS_CHECKPOINT: u64 = 0;
/// Runs kept before the newest are merged regardless of their sizes.
const MAX_RUNS: usize = 12;

/// How a [`StoredState`] uses memory.
///
/// ```
/// use streamwork::state::{StoreOptions, StoredState};
/// let options = StoreOptions {
///     unsettled_bytes: 64 << 20,
///     ..StoreOptions::default()
/// };
/// let counts: StoredState<u64, u64> = StoredState::with_options(options);
/// # let _ = counts;
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Unchanged entries read from the log and kept in memory for the next
    /// read (hot keys); beyond it, the cache is emptied and refilled.
    pub cache_entries: usize,
    /// The memory budget of what is not yet durable, for all the stored
    /// states of the process together: the tables of entries written since
    /// the last checkpoint, of those frozen by checkpoints still being
    /// written, and the newest durable one kept (their slots, from the
    /// types' sizes; heap data of keys and values is not counted). When the
    /// process's total leaves no room for two more growths of a state's
    /// table of writes, that state asks for the job's next checkpoint at
    /// once rather than at the interval, so that the tables grow with the
    /// budget, not with the input rate times the interval. By default a
    /// quarter of the memory the process may use (its cgroup's limit, or
    /// the machine's memory).
    pub unsettled_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_entries: 1 << 20,
            unsettled_bytes: crate::memory::default_budget(),
        }
    }
}

/// The bytes of a table of writes that holds `capacity` entries: its slots
/// (a table of `n` slots holds `7n/8` entries) of an entry and a control
/// byte each. Heap data the keys and values own is not counted.
fn table_bytes<K, V>(capacity: usize) -> usize {
    let slots = capacity.saturating_mul(8) / 7 + 1;
    slots.saturating_mul(std::mem::size_of::<(K, Option<V>)>() + 1)
}

/// What one state's tables not yet durable add to the process's total
/// ([`crate::memory::UNSETTLED`]): taken back when the state is dropped;
/// a clone starts from nothing (it counts its own tables when it looks).
#[derive(Debug, Default)]
struct Counted(usize);

impl Counted {
    /// Counts `bytes` instead of what it counted; the process's total.
    fn set(&mut self, bytes: usize) -> usize {
        let before = std::mem::replace(&mut self.0, bytes);
        crate::memory::recount(before, bytes)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted(0)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        crate::memory::recount(self.0, 0);
    }
}

/// While a frozen layer waits for its checkpoint to complete, a state looks
/// again at least every this many writes: one look is a load of the job's
/// last complete checkpoint.
const SETTLE_EVERY: usize = 4096;

/// The least part of the budget (one in this many) a state's table of
/// writes must hold for the state to hold the job's input back: one with
/// less has little to gain from it, and the total may be past the budget
/// for states of other jobs.
const HOLD_SHARE: usize = 64;

/// A hold on the job's input, taken while the process's total is past the
/// budget; a clone (an operator cloned into its instances) holds nothing.
#[derive(Default)]
struct Hold(Option<InputHold>);

impl Clone for Hold {
    fn clone(&self) -> Self {
        Hold(None)
    }
}

/// One run a manifest names: the checkpoint and instance that wrote it, and
/// its entries (for the merge policy).
type RunRef = (u64, u32, u64);

/// What was written since the last checkpoint: a value, or `None` for a
/// removed key.
type Layer<K, V> = HashTable<(K, Option<V>)>;

/// A layer frozen by a checkpoint and being written to the log.
#[derive(Clone)]
struct Frozen<K, V> {
    checkpoint: CheckpointId,
    /// Every change since the last run it builds on (it also holds what
    /// older frozen layers held, when their checkpoints had not completed).
    layer: Arc<Layer<K, V>>,
    /// Set by the coordinator once the run is durable.
    written: Arc<OnceLock<streamwork_core::SharedBytes>>,
    /// The durable runs from this index on are merged into its run.
    replaces_from: usize,
    /// Whether it writes over inherited runs (the first checkpoint after a
    /// restore at another parallelism).
    materializes: bool,
}

/// For a run inherited at a restore at another parallelism: the old
/// parallelism and the old instance whose manifest listed it (the key
/// groups that instance owned are current in it).
type ListedBy = Option<(u32, u32)>;

/// Which values a run keeps, `keep(value, bound)`, and the bound.
type Retain<V> = (fn(&V, i64) -> bool, i64);

/// A layer's entries of one key group: hash, key, value.
type GroupEntries<'a, K, V> = Vec<(u64, &'a K, &'a Option<V>)>;

/// A durable run, and which of its key groups this instance reads.
#[derive(Clone)]
struct Durable {
    run: Arc<Run>,
    reference: RunRef,
    /// Inherited at a restore at another parallelism: the old parallelism
    /// and the old instance whose manifest listed it, which owned the key
    /// groups whose entries in it are current.
    listed_by: ListedBy,
}

/// A value per key that lives in the checkpoint log rather than in memory:
/// keys written since the last checkpoint and hot keys are in memory; the
/// rest are read in place from the runs the log holds, on first touch.
///
/// A checkpoint freezes what was written since the last one (a swap: the
/// task thread neither copies nor serialises) and hands it over; the
/// coordinator writes it as a *run* beside the instance's part, merging
/// older runs into it when they have grown too many (size-tiered: a run is
/// merged with the newer ones once it is no larger than they are together),
/// so a checkpoint writes what changed plus a bounded share of merging, and
/// the log keeps every run a retained checkpoint still reads. A restored
/// instance maps its runs and starts at once; a restore at another
/// parallelism reads the old instances' runs for the key groups it now owns
/// and writes them over, whole, at its first checkpoint.
///
/// Reads take `&mut self`: a value read from the log is cached in memory.
///
/// What is not yet durable is held to [`StoreOptions::unsettled_bytes`] by
/// asking for early checkpoints, which needs the state opened with its
/// instance: `#[operator]` does it; an `Operator` written by hand calls
/// [`StateField::open_field`] (or `OperatorState::open_state`) in its
/// `open`, and a state checkpointed unopened says so in the log.
///
/// ```
/// use streamwork::core::state::CurrentKey;
/// use streamwork::state::StoredState;
/// let mut sums: StoredState<u64, i64> = StoredState::default();
/// let key = 7u64;
/// *sums.get_or_default(CurrentKey::for_testing(&key)) += 5;
/// assert_eq!(sums.get(CurrentKey::for_testing(&key)), Some(&5));
/// sums.remove(CurrentKey::for_testing(&key));
/// assert_eq!(sums.get(CurrentKey::for_testing(&key)), None);
/// ```
///
/// A clone shares the runs and frozen layers (immutable) and copies what is
/// in memory: operators are cloned into their instances before they run.
#[derive(Clone)]
pub struct StoredState<K, V> {
    /// Written since the last checkpoint (`None`: removed).
    dirty: Layer<K, V>,
    /// Everything below: apart, so that a write can probe `dirty` once.
    lower: Lower<K, V>,
}

/// What lies below a [`StoredState`]'s writes.
#[derive(Clone)]
struct Lower<K, V> {
    options: StoreOptions,
    /// Read from below and unchanged.
    clean: HashTable<(K, V)>,
    /// Frozen by checkpoints whose runs are not yet durable, oldest first.
    frozen: Vec<Frozen<K, V>>,
    /// Durable runs, oldest first.
    runs: Vec<Durable>,
    /// The layer of the newest durable run, kept in memory until the next
    /// one settles: the keys written in the last interval are the likeliest
    /// to be read again (they are in the newest run too).
    recent: Option<Arc<Layer<K, V>>>,
    /// Which values the next run keeps (a time-to-live leaves out what
    /// expired), with the bound it is given.
    retain: Option<Retain<V>>,
    key_groups: KeyGroups,
    /// The job's checkpoints: asked for one early when what is not yet
    /// durable is about to pass [`StoreOptions::unsettled_bytes`].
    checkpoints: Option<CheckpointView>,
    /// The number of entries written since the last checkpoint at which
    /// to look at the budget again: the table's next growth
    /// (`usize::MAX`: nowhere to ask).
    next_check: usize,
    /// Whether it asked since the last checkpoint.
    asked: bool,
    /// Whether its instance opened it ([`StateField::open_field`]), or a
    /// checkpoint already warned that it did not.
    opened: bool,
    /// What its tables not yet durable add to the process's total.
    counted: Counted,
    /// Held while the total is past the budget.
    hold: Hold,
    /// This instance and its component's parallelism.
    instance: InstanceIdx,
    parallelism: u32,
    /// A failure to read the log, kept to be reported by the next
    /// checkpoint (reads cannot fail: a key whose run cannot be read reads
    /// as absent until then, and the checkpoint fails the job).
    broken: Option<BadRun>,
}

impl<K: Key, V> Default for StoredState<K, V> {
    fn default() -> Self {
        StoredState::with_options(StoreOptions::default())
    }
}

impl<K, V> std::fmt::Debug for StoredState<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredState")
            .field("dirty", &self.dirty.len())
            .field("cached", &self.lower.clean.len())
            .field("frozen", &self.lower.frozen.len())
            .field("runs", &self.lower.runs.len())
            .finish()
    }
}

fn rehash<K: Key, T>(entry: &(K, T)) -> u64 {
    stable_hash(&entry.0)
}

impl<K: Key, V> StoredState<K, V> {
    /// Empty state with `options`.
    pub fn with_options(options: StoreOptions) -> Self {
        StoredState {
            dirty: HashTable::new(),
            lower: Lower {
                options,
                clean: HashTable::new(),
                frozen: Vec::new(),
                runs: Vec::new(),
                recent: None,
                retain: None,
                key_groups: KeyGroups::DEFAULT,
                checkpoints: None,
                next_check: usize::MAX,
                asked: false,
                opened: false,
                counted: Counted::default(),
                hold: Hold::default(),
                instance: InstanceIdx(0),
                parallelism: 1,
                broken: None,
            },
        }
    }

    /// Entries held in memory: written since the last checkpoint, cached,
    /// and frozen by checkpoints not yet durable.
    pub fn in_memory(&self) -> usize {
        self.dirty.len()
            + self.lower.clean.len()
            + self.lower.recent.as_ref().map_or(0, |r| r.len())
            + self
                .lower
                .frozen
                .iter()
                .map(|f| f.layer.len())
                .sum::<usize>()
    }

    /// The runs written from now on keep only the values `keep(value,
    /// bound)` accepts (a time-to-live: see
    /// [`ExpiringState`](crate::ExpiringState)); a value left out must be one
    /// whose every older value would be left out too, so that none resurfaces.
    pub(crate) fn retain_when(&mut self, keep: fn(&V, i64) -> bool, bound: i64) {
        self.lower.retain = Some((keep, bound));
    }

    /// Runs this instance reads from the log.
    pub fn runs(&self) -> usize {
        self.lower.runs.len()
    }
}

impl<K, V> StoredState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Vec<RunEntry<K, V>>: StateData,
{
    /// The current key's value, looked up in memory, then in the runs
    /// newest first (a value found there is cached).
    pub fn get(&mut self, key: CurrentKey<'_, K>) -> Option<&V> {
        let (k, hash) = (key.get(), key.hash());
        if self.dirty.find(hash, |(d, _)| d == k).is_some() {
            return self
                .dirty
                .find(hash, |(d, _)| d == k)
                .and_then(|(_, value)| value.as_ref());
        }
        if self.lower.clean.find(hash, |(c, _)| c == k).is_none() {
            let value = self.lower.below(k, hash)?;
            self.lower.cache(k.clone(), hash, value);
        }
        self.lower.clean.find(hash, |(c, _)| c == k).map(|(_, v)| v)
    }

    /// The current key's value, mutably (it is written at the next
    /// checkpoint).
    pub fn get_mut(&mut self, key: CurrentKey<'_, K>) -> Option<&mut V> {
        self.within_budget();
        let (k, hash) = (key.get(), key.hash());
        match self.dirty.entry(hash, |(d, _)| d == k, rehash) {
            Entry::Occupied(entry) => entry.into_mut().1.as_mut(),
            Entry::Vacant(entry) => {
                let value = self.lower.take_below(k, hash)?;
                entry.insert((k.clone(), Some(value))).into_mut().1.as_mut()
            }
        }
    }

    /// The current key's value, `V::default()` if it has none.
    pub fn get_or_default(&mut self, key: CurrentKey<'_, K>) -> &mut V
    where
        V: Default,
    {
        self.within_budget();
        let (k, hash) = (key.get(), key.hash());
        // One probe when the key was written since the last checkpoint.
        let slot = match self.dirty.entry(hash, |(d, _)| d == k, rehash) {
            Entry::Occupied(entry) => &mut entry.into_mut().1,
            Entry::Vacant(entry) => {
                let value = self.lower.take_below(k, hash).unwrap_or_default();
                &mut entry.insert((k.clone(), Some(value))).into_mut().1
            }
        };
        slot.get_or_insert_with(V::default)
    }

    /// Sets the current key's value.
    pub fn insert(&mut self, key: CurrentKey<'_, K>, value: V) {
        self.write(key, Some(value));
    }

    /// Removes the current key's value.
    pub fn remove(&mut self, key: CurrentKey<'_, K>) {
        self.write(key, None);
    }

    fn write(&mut self, key: CurrentKey<'_, K>, value: Option<V>) {
        self.within_budget();
        let (k, hash) = (key.get(), key.hash());
        if let Ok(cached) = self.lower.clean.find_entry(hash, |(c, _)| c == k) {
            cached.remove();
        }
        match self.dirty.entry(hash, |(d, _)| d == k, rehash) {
            Entry::Occupied(mut entry) => entry.get_mut().1 = value,
            Entry::Vacant(entry) => {
                entry.insert((k.clone(), value));
            }
        }
    }

    /// Looks at the budget when the table of writes is full (its next
    /// write grows it): one comparison a write.
    #[inline]
    fn within_budget(&mut self) {
        if self.dirty.len() >= self.lower.next_check {
            self.check_budget();
        }
    }

    /// Settles the frozen layers whose checkpoints completed since the
    /// last look (their runs are read from the log from now on), counts
    /// this state's tables not yet durable into the process's total, and
    /// asks for the job's next checkpoint (once until it comes)
    /// unless the total leaves room for two more growths of the table of
    /// writes: a growth doubles it, and the old table lives on while its
    /// entries are copied, so room for `4 × table` lets the checkpoint come
    /// while the table grows at most once more.
    ///
    /// Past the budget itself (input faster than checkpoints), a state
    /// whose table of writes holds at least 1/[`HOLD_SHARE`] of the budget
    /// also holds the job's input back until its next snapshot, which it has
    /// asked for: its table stops growing while the checkpoint travels and
    /// the earlier ones are written. It lets go of the newest durable table
    /// (a cache) too. A snapshot always releases the hold, so a hold never
    /// outlasts one checkpoint, whatever holds the rest of the process's
    /// total; and a state with a small table of writes (little to gain)
    /// never holds.
    #[cold]
    fn check_budget(&mut self) {
        if self.lower.checkpoints.is_none() {
            self.lower.next_check = usize::MAX;
            return;
        }
        // Layers whose checkpoints completed since the last look are read
        // from their runs from now on: let go of them now, not at the next
        // snapshot.
        if let Some(completed) = self
            .lower
            .checkpoints
            .as_ref()
            .map(CheckpointView::completed)
            && let Err(bad) = self.settle(completed)
        {
            self.lower.broken.get_or_insert(bad);
        }
        let budget = self.lower.options.unsettled_bytes;
        if crate::memory::unsettled_bytes() > budget {
            // The newest durable table is read from its run.
            if let Some(recent) = self.lower.recent.take() {
                crate::reclaim::release(recent);
            }
        }
        let bytes = |capacity: usize| table_bytes::<K, V>(capacity);
        let dirty = bytes(self.dirty.capacity());
        let held = self
            .lower
            .frozen
            .iter()
            .map(|f| f.layer.capacity())
            .chain(self.lower.recent.as_ref().map(|r| r.capacity()))
            .map(bytes)
            .sum::<usize>();
        let total = self.lower.counted.set(dirty + held);
        let room = dirty.max(bytes(1024)).saturating_mul(4);
        if !self.lower.asked && total.saturating_add(room) > budget {
            self.lower.asked = true;
            if let Some(checkpoints) = &self.lower.checkpoints {
                checkpoints.request_checkpoint();
            }
        }
        if total <= budget {
            self.lower.hold.0 = None;
        } else if self.lower.hold.0.is_none()
            && dirty >= budget / HOLD_SHARE
            && let Some(checkpoints) = &self.lower.checkpoints
        {
            self.lower.hold.0 = Some(checkpoints.hold_input());
        }
        // The next look: at the table's next growth, or sooner while a
        // frozen layer waits for its checkpoint to complete.
        let next_growth = self.dirty.capacity().max(self.dirty.len() + 1);
        self.lower.next_check = if self.lower.frozen.is_empty() {
            next_growth
        } else {
            next_growth.min(self.dirty.len() + SETTLE_EVERY)
        };
    }

    /// After a checkpoint took the table of writes: a new interval, and
    /// the input free again.
    fn plan_budget(&mut self) {
        self.lower.hold.0 = None;
        self.lower.asked = false;
        self.lower.next_check = 0;
        self.within_budget();
    }

    /// Every key and value this instance owns, in no order (reads every
    /// run: for tests; at the end of a bounded input, prefer
    /// [`for_each`](Self::for_each), which does not hold them all).
    pub fn entries(&mut self) -> Result<Vec<(K, V)>, StateError> {
        let mut all = Vec::new();
        self.for_each(|k, v| all.push((k, v)))?;
        Ok(all)
    }

    /// Calls `f` with every key and value this instance owns, one key group
    /// at a time: what it holds in memory at once is one group's entries,
    /// so state larger than memory can be read out whole.
    pub fn for_each(&mut self, mut f: impl FnMut(K, V)) -> Result<(), StateError> {
        let lower = &self.lower;
        let groups = lower.key_groups.count();
        // The layers' entries by key group, newest layer last.
        let mut layered: Vec<Vec<(&K, &Option<V>)>> = vec![Vec::new(); groups as usize];
        let layers = lower
            .frozen
            .iter()
            .map(|f| &*f.layer)
            .chain(std::iter::once(&self.dirty));
        for layer in layers {
            for (k, v) in layer.iter() {
                layered[lower.key_groups.key_group(stable_hash(k)) as usize].push((k, v));
            }
        }
        let mut group_entries: HashMap<K, Option<V>> = HashMap::new();
        for group in 0..groups {
            if lower.key_groups.instance_of(group, lower.parallelism) != lower.instance.0 {
                continue;
            }
            group_entries.clear();
            for durable in lower.runs.iter().filter(|d| lower.reads(d, group)) {
                for_each_in(&durable.run, group, |_, k, v| {
                    group_entries.insert(k, v);
                })
                .map_err(StateError::from)?;
            }
            for &(k, v) in &layered[group as usize] {
                group_entries.insert(k.clone(), v.clone());
            }
            for (k, v) in group_entries.drain() {
                if let Some(v) = v {
                    f(k, v);
                }
            }
        }
        Ok(())
    }

    /// The frozen layer of the newest complete checkpoint becomes a run read
    /// from the log, replacing the runs it merged and every older layer.
    fn settle(&mut self, completed: CheckpointId) -> Result<(), BadRun> {
        let Some(at) = self.lower.frozen.iter().rposition(|f| {
            !f.checkpoint.is_final() && f.checkpoint <= completed && f.written.get().is_some()
        }) else {
            return Ok(());
        };
        let frozen = &self.lower.frozen[at];
        let Some(bytes) = frozen.written.get().cloned() else {
            unreachable!("checked above")
        };
        // Written by this instance's own serialiser: not validated again.
        let run = Run::open_own(bytes, self.lower.key_groups)?;
        let entries = run.entries();
        self.lower
            .runs
            .truncate(frozen.replaces_from.min(self.lower.runs.len()));
        if frozen.materializes {
            self.lower.runs.retain(|d| d.listed_by.is_none());
        }
        self.lower.runs.push(Durable {
            run: Arc::new(run),
            reference: (frozen.checkpoint.get(), self.lower.instance.0, entries),
            listed_by: None,
        });
        let mut settled: Vec<_> = self.lower.frozen.drain(..=at).map(|f| f.layer).collect();
        let newest = settled.pop();
        if let Some(older) = std::mem::replace(&mut self.lower.recent, newest) {
            settled.push(older);
        }
        if !settled.is_empty() {
            crate::reclaim::release(settled);
        }
        Ok(())
    }

    /// Where the merge of the next run starts: the runs from that index on
    /// are merged with what changed (size-tiered).
    fn merge_from(&self, changed: u64) -> usize {
        if self.lower.runs.iter().any(|d| d.listed_by.is_some()) {
            return 0;
        }
        let mut from = self.lower.runs.len();
        let mut newer = changed;
        while from > 0 {
            let size = self.lower.runs[from - 1].reference.2;
            if size > newer && self.lower.runs.len() - from < MAX_RUNS {
                break;
            }
            newer += size;
            from -= 1;
        }
        from
    }

    fn take_snapshot(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        // A read that found a run unreadable read as absent: the job fails
        // here, before a checkpoint could record the difference.
        if let Some(bad) = self.lower.broken.take() {
            return Err(bad.into());
        }
        self.lower.key_groups = ctx.key_groups;
        self.lower.instance = ctx.instance;
        self.lower.parallelism = ctx.parallelism;
        self.settle(ctx.completed)?;
        let changed = self.dirty.len() as u64
            + self
                .lower
                .frozen
                .iter()
                .map(|f| f.layer.len() as u64)
                .sum::<u64>();
        let from = self.merge_from(changed);
        let mut manifest: Vec<RunRef> = self.lower.runs[..from]
            .iter()
            .map(|d| d.reference)
            .collect();
        let builds_on: Vec<CheckpointId> = manifest
            .iter()
            .map(|r| CheckpointId::new(r.0))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut side = None;
        if changed > 0 || from < self.lower.runs.len() {
            let layer = Arc::new(std::mem::take(&mut self.dirty));
            let mut layers: Vec<Arc<Layer<K, V>>> =
                self.lower.frozen.iter().map(|f| f.layer.clone()).collect();
            layers.push(layer.clone());
            let merged = self.lower.runs[from..]
                .iter()
                .map(|d| (d.run.clone(), d.listed_by))
                .collect();
            let payload = Arc::new(RunPayload {
                layers,
                merged,
                key_groups: self.lower.key_groups,
                keep: (self.lower.instance.0, self.lower.parallelism),
                drop_removed: from == 0,
                retain: self.lower.retain,
            });
            let written = Arc::new(OnceLock::new());
            let materializes = from == 0 && self.lower.runs.iter().any(|d| d.listed_by.is_some());
            self.lower.frozen.push(Frozen {
                checkpoint: ctx.checkpoint,
                layer,
                written: written.clone(),
                replaces_from: from,
                materializes,
            });
            manifest.push((THIS_CHECKPOINT, self.lower.instance.0, changed));
            side = Some(SideRecord {
                stream: 0,
                schema: RUN_SCHEMA,
                payload,
                // A run checks each key group as it is first read.
                check: SideCheck::ByReader,
                written,
            });
        }
        Ok(FieldSnapshot {
            kind: FieldKind::Stored,
            schema: MANIFEST_SCHEMA,
            bytes: crate::archive(&manifest)?,
            side,
            builds_on,
        })
    }

    fn restore_from(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        field.expect(FieldKind::Stored, MANIFEST_SCHEMA)?;
        let restore = field.restore;
        self.lower.key_groups = restore.key_groups;
        self.lower.instance = restore.instance;
        self.lower.parallelism = restore.parallelism;
        self.dirty = HashTable::new();
        self.lower.clean = HashTable::new();
        self.lower.frozen.clear();
        self.lower.recent = None;
        self.lower.runs.clear();
        let old_parallelism = field.parts.len() as u32;
        let rescaled = old_parallelism != restore.parallelism;
        let stream = field.stream();
        for &(part, _, _, bytes) in &field.parts {
            if !rescaled && part != restore.instance {
                continue;
            }
            let manifest: Vec<RunRef> = rkyv::from_bytes::<Vec<RunRef>, rancor::Error>(bytes)
                .map_err(|e| field.refused(format!("its manifest does not read: {e}")))?;
            for (checkpoint, writer, entries) in manifest {
                let checkpoint = if checkpoint == THIS_CHECKPOINT {
                    restore.checkpoint
                } else {
                    CheckpointId::new(checkpoint)
                };
                if restore.records.is_none() {
                    return Err(field.refused(
                        "its runs are in the checkpoint log, and this restore has none (a test harness): test stored state with the runtime".to_string(),
                    ));
                }
                let bytes = restore
                    .side_record(checkpoint, stream, InstanceIdx(writer))
                    .ok_or_else(|| {
                        field.refused(format!(
                            "the run instance {writer} wrote in checkpoint {checkpoint} is not in the checkpoint log"
                        ))
                    })?;
                let run = Run::open(bytes, self.lower.key_groups).map_err(|e| {
                    field.refused(format!(
                        "the run instance {writer} wrote in checkpoint {checkpoint}: {}",
                        e.0
                    ))
                })?;
                self.lower.runs.push(Durable {
                    run: Arc::new(run),
                    reference: (checkpoint.get(), writer, entries),
                    listed_by: rescaled.then_some((old_parallelism, part.0)),
                });
            }
        }
        Ok(())
    }
}

impl<K, V> Lower<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Vec<RunEntry<K, V>>: StateData,
{
    /// The key's value from the cache (removed from it) or below.
    fn take_below(&mut self, k: &K, hash: u64) -> Option<V> {
        match self.clean.find_entry(hash, |(c, _)| c == k) {
            Ok(cached) => Some(cached.remove().0.1),
            Err(_) => self.below(k, hash),
        }
    }

    fn cache(&mut self, k: K, hash: u64, value: V) {
        if self.clean.len() >= self.options.cache_entries {
            self.clean.clear();
        }
        self.clean.insert_unique(hash, (k, value), rehash);
    }

    /// The key's value in the frozen layers and the runs, newest first.
    fn below(&mut self, k: &K, hash: u64) -> Option<V> {
        let layers = self
            .frozen
            .iter()
            .rev()
            .map(|f| &f.layer)
            .chain(self.recent.as_ref());
        for layer in layers {
            if let Some((_, value)) = layer.find(hash, |(f, _)| f == k) {
                return value.clone();
            }
        }
        let group = self.key_groups.key_group(hash);
        for durable in self.runs.iter().rev() {
            if !self.reads(durable, group) {
                continue;
            }
            match read_run::<K, V>(&durable.run, group, hash, k) {
                Ok(Some(value)) => return value,
                Ok(None) => {}
                Err(reason) => {
                    self.broken.get_or_insert(reason);
                    return None;
                }
            }
        }
        None
    }

    /// Whether `durable` holds current entries of key group `group` for
    /// this instance.
    fn reads(&self, durable: &Durable, group: u32) -> bool {
        match durable.listed_by {
            None => true,
            Some((old_parallelism, old_instance)) => {
                self.key_groups.instance_of(group, old_parallelism) == old_instance
            }
        }
    }
}

impl From<BadRun> for StateError {
    fn from(e: BadRun) -> Self {
        StateError::RunUnreadable { reason: e.0 }
    }
}

/// The value run `run` holds for `k` in `group`: `Some(None)` if removed
/// there, `None` if it does not mention it.
fn read_run<K, V>(run: &Run, group: u32, hash: u64, k: &K) -> Result<Option<Option<V>>, BadRun>
where
    K: Key + StateData,
    V: StateData,
    Vec<RunEntry<K, V>>: StateData,
{
    if !run.may_hold(group, hash)? {
        return Ok(None);
    }
    let Some(entries) = run.group::<K, V>(group)? else {
        return Ok(None);
    };
    let Some(archived) = find::<K, V>(entries, hash, k).map_err(BadRun::of)? else {
        return Ok(None);
    };
    rkyv::deserialize::<Option<V>, rancor::Error>(archived)
        .map(Some)
        .map_err(BadRun::of)
}

/// Calls `f` with every entry of `run` in `group`, in hash order.
fn for_each_in<K, V>(
    run: &Run,
    group: u32,
    mut f: impl FnMut(u64, K, Option<V>),
) -> Result<(), BadRun>
where
    K: StateData,
    V: StateData,
    Vec<RunEntry<K, V>>: StateData,
{
    let Some(entries) = run.group::<K, V>(group)? else {
        return Ok(());
    };
    for entry in entries.iter() {
        let k =
            rkyv::deserialize::<K, rancor::Error>(&entry.1).map_err(|e| BadRun(e.to_string()))?;
        let v = rkyv::deserialize::<Option<V>, rancor::Error>(&entry.2)
            .map_err(|e| BadRun(e.to_string()))?;
        f(entry.0.to_native(), k, v);
    }
    Ok(())
}

/// What a checkpoint hands the coordinator to write one run: the layers
/// frozen since the last durable run, and the runs merged into it.
struct RunPayload<K, V> {
    /// Oldest first; a newer layer's entry wins.
    layers: Vec<Arc<Layer<K, V>>>,
    /// Oldest first, each with the old instance that listed it if inherited.
    merged: Vec<(Arc<Run>, ListedBy)>,
    key_groups: KeyGroups,
    /// This instance and its parallelism: only its key groups are written.
    keep: (u32, u32),
    /// A merge down to the first run: removed keys need no tombstone.
    drop_removed: bool,
    /// Values the run keeps (the others are left out, without a trace).
    retain: Option<Retain<V>>,
}

impl<K, V> std::fmt::Debug for RunPayload<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunPayload")
            .field("layers", &self.layers.len())
            .field("merged", &self.merged.len())
            .finish()
    }
}

impl<K, V> RunPayload<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Vec<RunEntry<K, V>>: StateData,
{
    fn write(&self, out: &mut dyn std::io::Write) -> Result<(), BadRun> {
        let groups = self.key_groups.count();
        // Each layer's entries by key group, once.
        let mut by_group: Vec<Vec<GroupEntries<'_, K, V>>> =
            vec![vec![Vec::new(); self.layers.len()]; groups as usize];
        for (l, layer) in self.layers.iter().enumerate() {
            for (k, v) in layer.iter() {
                let hash = stable_hash(k);
                by_group[self.key_groups.key_group(hash) as usize][l].push((hash, k, v));
            }
        }
        let (instance, parallelism) = self.keep;
        let mut writer = RunWriter::new(self.key_groups, out);
        for group in 0..groups {
            if self.key_groups.instance_of(group, parallelism) != instance {
                continue;
            }
            // Every source's entries of the group, ranked oldest first;
            // sorted by hash with the newest first, the first of each key
            // is kept.
            let mut ranked: Vec<(u64, u32, K, Option<V>)> = Vec::new();
            let mut rank = 0u32;
            for (run, listed_by) in &self.merged {
                rank += 1;
                if let Some((old_parallelism, old_instance)) = *listed_by
                    && self.key_groups.instance_of(group, old_parallelism) != old_instance
                {
                    continue;
                }
                for_each_in::<K, V>(run, group, |hash, k, v| ranked.push((hash, rank, k, v)))?;
            }
            for layer in &by_group[group as usize] {
                rank += 1;
                ranked.extend(
                    layer
                        .iter()
                        .map(|&(hash, k, v)| (hash, rank, k.clone(), v.clone())),
                );
            }
            ranked.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let mut entries: Vec<RunEntry<K, V>> = Vec::with_capacity(ranked.len());
            let mut block_start = 0;
            for (hash, _, k, v) in ranked {
                if entries.last().is_some_and(|e| e.0 != hash) {
                    block_start = entries.len();
                }
                // A newer entry of the same key came first: this one is
                // superseded (equal hashes are rare, so is this scan).
                if entries[block_start..]
                    .iter()
                    .any(|e| e.0 == hash && e.1 == k)
                {
                    continue;
                }
                entries.push((hash, k, v));
            }
            if self.drop_removed {
                entries.retain(|e| e.2.is_some());
            }
            if let Some((keep, bound)) = self.retain {
                entries.retain(|e| e.2.as_ref().is_none_or(|v| keep(v, bound)));
            }
            writer.group(group, &entries)?;
        }
        writer.finish()
    }
}

impl<K, V> DeferredBytes for RunPayload<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Vec<RunEntry<K, V>>: StateData,
{
    fn produce(&self, out: &mut dyn std::io::Write) -> Result<(), TaskError> {
        self.write(out).map_err(|reason| {
            TaskError::Snapshot(format!("writing a run of stored state: {reason}"))
        })
    }
}

impl<K, V> StateField for StoredState<K, V>
where
    K: Key + StateData,
    V: StateData + Clone + Send + Sync + 'static,
    Vec<RunEntry<K, V>>: StateData,
{
    const LAYOUT: u64 = crate::layout_mix(
        crate::layout_mix(crate::layout_of("StoredState"), K::LAYOUT),
        V::LAYOUT,
    );

    fn open_field(&mut self, ctx: &InstanceContext) {
        self.lower.checkpoints = ctx.checkpoints().cloned();
        self.lower.next_check = 0;
        self.lower.opened = true;
    }

    fn snapshot_field(&mut self, ctx: &SnapshotContext) -> Result<FieldSnapshot, StateError> {
        if !self.lower.opened {
            // `#[operator]` opens its state; an `Operator` written by hand
            // must call `OperatorState::open_state` (or this) in `open`.
            self.lower.opened = true;
            tracing::warn!(
                "a stored state of instance {} was checkpointed without being opened: its memory budget cannot ask for early checkpoints; call `StateField::open_field` (or `OperatorState::open_state`) from the operator's `open`",
                ctx.instance.0
            );
        }
        let snapshot = self.take_snapshot(ctx);
        self.plan_budget();
        snapshot
    }

    fn restore_field(&mut self, field: &FieldRestore<'_>) -> Result<(), StateError> {
        self.restore_from(field)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// A state opened in a checkpointed job asks for an early checkpoint
    /// when its table of writes leaves no room for two more growths within
    /// the budget: with 1 MiB and 25-byte slots, once the table has grown
    /// to 16,384 slots (410 kB: four times that is past the budget), at its
    /// 7,170th entry; it asks once, and never without checkpoints to ask.
    /// Past the budget itself (the table's growth to 65,536 slots, 1.6 MB)
    /// it holds the job's input, once; a clone holds nothing, and a dropped
    /// state lets go. (No other test of this binary counts a state into the
    /// process's total.)
    #[test]
    fn writes_past_the_budget_ask_for_a_checkpoint_once_and_hold_the_input() {
        let early = Arc::new(AtomicBool::new(false));
        let holds = Arc::new(streamwork_core::InputHolds::default());
        let view = CheckpointView::new(Arc::new(AtomicU64::new(0)), None)
            .with_early_requests(early.clone())
            .with_input_holds(holds.clone());
        let ctx = InstanceContext::new("counts", InstanceIdx(0), 1, KeyGroups::DEFAULT)
            .with_checkpoints(view);
        let options = StoreOptions {
            unsettled_bytes: 1 << 20,
            ..StoreOptions::default()
        };
        let mut counts: StoredState<u64, u64> = StoredState::with_options(options);
        counts.open_field(&ctx);
        for key in 0..7_169u64 {
            *counts.get_or_default(CurrentKey::for_testing(&key)) += 1;
        }
        assert!(!early.load(Ordering::SeqCst), "asked within the budget");
        let key = 7_169u64;
        counts.insert(CurrentKey::for_testing(&key), 1);
        assert!(early.swap(false, Ordering::SeqCst), "not asked past it");
        for key in 7_170..28_672u64 {
            *counts.get_or_default(CurrentKey::for_testing(&key)) += 1;
        }
        assert!(!holds.any(), "held within the budget");
        for key in 28_672..60_000u64 {
            *counts.get_or_default(CurrentKey::for_testing(&key)) += 1;
        }
        assert!(
            !early.load(Ordering::SeqCst),
            "asked twice before a checkpoint"
        );
        assert!(holds.any(), "held past it");
        assert_eq!(holds.taken(), 1, "held once");
        let clone = counts.clone();
        drop(clone);
        assert!(holds.any(), "a clone holds nothing, and lets go of nothing");
        assert!(crate::memory::recount(0, 0) >= table_bytes::<u64, u64>(60_000));
        drop(counts);
        assert!(!holds.any(), "a dropped state lets go");
        assert_eq!(
            crate::memory::recount(0, 0),
            0,
            "a dropped state counts nothing"
        );

        let unasked = InstanceContext::new("counts", InstanceIdx(0), 1, KeyGroups::DEFAULT);
        let mut counts: StoredState<u64, u64> = StoredState::with_options(options);
        counts.open_field(&unasked);
        for key in 0..5_000u64 {
            counts.insert(CurrentKey::for_testing(&key), key);
        }
        assert_eq!(counts.get(CurrentKey::for_testing(&4_999)), Some(&4_999));
    }
}
