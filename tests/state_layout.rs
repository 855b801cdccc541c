//! A checkpoint keeps the layout of each managed field's types: a build
//! whose state type changed in a way rkyv would read without complaint (a
//! field added where the old layout had padding, two fields of one type
//! swapped) is refused by the field's name, where it used to read the old
//! bytes as values they do not hold.

mod support;

use streamwork::core::testkit::{Fault, InjectFault};
use streamwork::prelude::*;
use support::{Numbers, dir, exactly_once};

/// The first build's totals per key.
mod v1 {
    #[streamwork::state_data]
    #[derive(Clone, Debug, Default)]
    pub struct Total {
        pub sum: i64,
        pub count: u16,
    }
}

/// A later build: a field added where `v1::Total` had padding (the
/// archived size is the same, 16 bytes).
mod v2 {
    #[streamwork::state_data]
    #[derive(Clone, Debug, Default)]
    pub struct Total {
        pub sum: i64,
        pub count: u16,
        pub largest: u32,
    }
}

/// Another: the same fields, of the same type, in the other order.
mod swapped {
    #[streamwork::state_data]
    #[derive(Clone, Debug, Default)]
    pub struct Pair {
        pub b: i64,
        pub a: i64,
    }
}

mod unswapped {
    #[streamwork::state_data]
    #[derive(Clone, Debug, Default)]
    pub struct Pair {
        pub a: i64,
        pub b: i64,
    }
}

/// A value kept per key, whatever its type.
trait Update: Clone + Default + Send + Sync + 'static {
    fn update(&mut self, v: i64);
}

impl Update for v1::Total {
    fn update(&mut self, v: i64) {
        self.sum += v;
        self.count = self.count.wrapping_add(1);
    }
}

impl Update for v2::Total {
    fn update(&mut self, v: i64) {
        self.sum += v;
        self.count = self.count.wrapping_add(1);
        self.largest = self.largest.max(v as u32);
    }
}

impl Update for swapped::Pair {
    fn update(&mut self, v: i64) {
        self.a += v;
        self.b -= v;
    }
}

impl Update for unswapped::Pair {
    fn update(&mut self, v: i64) {
        self.a += v;
        self.b -= v;
    }
}

/// Keeps a `T` per key.
#[derive(Clone, Default, State)]
struct Totals<T: Update + streamwork::state::StateData> {
    totals: KeyedState<u64, T>,
}

#[operator]
impl<T: Update + streamwork::state::StateData> Totals<T> {
    fn on_record(
        &mut self,
        key: CurrentKey<'_, u64>,
        (_, v): (u64, i64),
        out: &mut Collector<(u64, i64)>,
    ) {
        self.totals.get_or_default(key).update(v);
        out.emit((*key, v));
    }
}

/// What the jobs below run: a keyed operator of numbers.
trait TotalsJob:
    Operator<In = (u64, i64), Key = ByKey<u64>, Out = Collector<(u64, i64)>, Time = AnyTime>
    + Clone
    + Send
    + 'static
{
}

impl<O> TotalsJob for O where
    O: Operator<In = (u64, i64), Key = ByKey<u64>, Out = Collector<(u64, i64)>, Time = AnyTime>
        + Clone
        + Send
        + 'static
{
}

/// A job of `operator` over 4,000 numbers that fails at the 3,000th record
/// (after a checkpoint completed at the 2,000th) when `fail` is set.
fn job<O>(operator: O, fail: bool, sink: &CollectSink<(u64, i64)>) -> JobGraph
where
    O: TotalsJob,
{
    let at = if fail { 3_000 } else { usize::MAX };
    let fault = InjectFault::new(0, Fault::BeforeRecord(at));
    job! {
        delivery exactly_once;
        source numbers = Numbers::new(4_000);
        operator totals = operator <- numbers.key(|(k, _): &(u64, i64)| *k);
        operator faulty = fault <- totals;
        sink out = sink.transactional() <- faulty;
    }
    .unwrap()
}

/// Runs `before` until it fails after a checkpoint, then `after` from that
/// checkpoint: the second run's outcome.
fn resumed<A, B>(name: &str, before: A, after: B) -> Result<(), String>
where
    A: TotalsJob,
    B: TotalsJob,
{
    let dir = dir(name);
    let sink = CollectSink::new();
    let error = job(before, true, &sink)
        .run_with(exactly_once(&dir, 0))
        .expect_err("the fault fails the first run");
    assert!(error.to_string().contains("injected fault"), "{error}");
    job(after, false, &sink)
        .run_with(exactly_once(&dir, 0))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// [`resumed`], refused for field `totals`'s changed layout: the error.
fn refused_for_its_layout<A, B>(name: &str, before: A, after: B) -> String
where
    A: TotalsJob,
    B: TotalsJob,
{
    let error = resumed(name, before, after).expect_err("the changed type is refused");
    assert!(error.contains("field `totals`"), "{error}");
    assert!(error.contains("another layout of its types"), "{error}");
    error
}

#[test]
fn a_field_added_in_padding_is_refused_by_name() {
    let error = refused_for_its_layout(
        "layout-padding",
        Totals::<v1::Total>::default(),
        Totals::<v2::Total>::default(),
    );
    assert!(
        error.contains("Resume with the build that wrote"),
        "{error}"
    );
    assert!(error.contains(r#"#[state(forget("totals"))]"#), "{error}");
}

#[test]
fn fields_of_one_type_swapped_are_refused() {
    refused_for_its_layout(
        "layout-swapped",
        Totals::<unswapped::Pair>::default(),
        Totals::<swapped::Pair>::default(),
    );
}

#[test]
fn a_derived_fingerprint_is_fixed() {
    use streamwork::state::StateLayout;
    // The compatibility contract of `#[state_data]`: a change in how it
    // fingerprints a type refuses every checkpoint written before.
    assert_eq!(<v1::Total as StateLayout>::LAYOUT, 0x69a1_db7f_5650_98f8);
    assert_ne!(
        <v1::Total as StateLayout>::LAYOUT,
        <v2::Total as StateLayout>::LAYOUT
    );
    assert_ne!(
        <swapped::Pair as StateLayout>::LAYOUT,
        <unswapped::Pair as StateLayout>::LAYOUT
    );
}

/// A window keeps its records: a window over readings of a changed type
/// is refused too (its state is a window's, not a `#[derive(State)]`
/// field: the fingerprint is kept beside the window's snapshot).
#[test]
fn a_window_over_a_changed_type_is_refused() {
    use std::time::Duration;
    use streamwork::core::CheckpointId;
    use streamwork::core::testkit::Harness;
    let count_v1 = |readings: WindowContents<'_, v1::Total>| readings.len() as u64;
    let count_v2 = |readings: WindowContents<'_, v2::Total>| readings.len() as u64;
    let mut before = Harness::new(
        Windows::tumbling(Duration::from_secs(1)).apply::<v1::Total, u32, u64, _>(count_v1),
    );
    before.record(7, v1::Total { sum: 3, count: 1 }, Some(10));
    let snapshot = before.snapshot().expect("a window checkpoints");
    let same = Harness::restored(
        Windows::tumbling(Duration::from_secs(1)).apply::<v1::Total, u32, u64, _>(count_v1),
        CheckpointId::new(1),
        Some(&snapshot),
    );
    assert!(same.is_ok(), "the same types restore");
    let error = Harness::restored(
        Windows::tumbling(Duration::from_secs(1)).apply::<v2::Total, u32, u64, _>(count_v2),
        CheckpointId::new(1),
        Some(&snapshot),
    )
    .err()
    .expect("the changed type is refused")
    .to_string();
    assert!(error.contains("another layout of its types"), "{error}");
    assert!(
        error.contains("Resume with the build that wrote"),
        "{error}"
    );
}

#[test]
fn the_same_types_resume() {
    resumed(
        "layout-same",
        Totals::<v1::Total>::default(),
        Totals::<v1::Total>::default(),
    )
    .expect("the same build resumes");
}
