//! Each grouping routes records as documented, shown by instance index.

use std::collections::{BTreeMap, BTreeSet};

use streamwork::prelude::*;

/// Tags each record with the index of the instance that saw it.
#[derive(Clone, Default)]
struct TagInstance {
    instance: u32,
}

#[operator(stateless)]
impl TagInstance {
    fn open(&mut self, ctx: &InstanceContext) {
        self.instance = ctx.instance().0;
    }

    fn on_record(&self, value: u64, out: &mut Collector<(u32, u64)>) {
        out.emit((self.instance, value));
    }
}

fn run_tagged(
    build: impl FnOnce(&mut JobBuilder, Stream<u64>) -> Stream<(u32, u64)>,
) -> Vec<(u32, u64)> {
    let mut job = JobBuilder::new("groupings");
    let numbers = job.source("numbers", 1, VecSource::new((0..1000u64).collect()));
    let tagged = build(&mut job, numbers);
    let sink = CollectSink::new();
    job.sink("sink", 1, sink.clone(), tagged);
    job.build().unwrap().run().unwrap();
    sink.values()
}

#[test]
fn fields_grouping_sends_every_record_of_a_key_to_one_instance() {
    let tagged = run_tagged(|job, numbers| {
        job.operator(
            "tag",
            4,
            TagInstance::default(),
            numbers.key_by(|v: &u64| v % 37),
        )
    });
    assert_eq!(tagged.len(), 1000);
    let mut owners: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (instance, value) in &tagged {
        owners.entry(value % 37).or_default().insert(*instance);
    }
    assert_eq!(owners.len(), 37);
    assert!(
        owners.values().all(|instances| instances.len() == 1),
        "{owners:?}"
    );
    let used: BTreeSet<u32> = owners.values().flatten().copied().collect();
    assert!(
        used.len() > 1,
        "37 keys should spread over more than one of 4 instances"
    );
}

#[test]
fn fields_grouping_is_stable_across_runs() {
    let route = || {
        let mut tagged = run_tagged(|job, numbers| {
            job.operator(
                "tag",
                3,
                TagInstance::default(),
                numbers.key_by(|v: &u64| v % 11),
            )
        });
        tagged.sort();
        tagged
    };
    assert_eq!(route(), route());
}

#[test]
fn shuffle_grouping_spreads_evenly() {
    let tagged = run_tagged(|job, numbers| {
        job.operator("tag", 4, TagInstance::default(), numbers.shuffle())
    });
    let mut per_instance = [0usize; 4];
    for (instance, _) in &tagged {
        per_instance[*instance as usize] += 1;
    }
    assert_eq!(per_instance, [250, 250, 250, 250]);
}

#[test]
fn broadcast_grouping_reaches_every_instance() {
    let tagged = run_tagged(|job, numbers| {
        job.operator("tag", 3, TagInstance::default(), numbers.broadcast())
    });
    assert_eq!(tagged.len(), 3000);
    for instance in 0..3 {
        let values: BTreeSet<u64> = tagged
            .iter()
            .filter(|(i, _)| *i == instance)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(values.len(), 1000);
    }
}

#[test]
fn global_grouping_sends_everything_to_instance_zero() {
    let tagged =
        run_tagged(|job, numbers| job.operator("tag", 3, TagInstance::default(), numbers.global()));
    assert_eq!(tagged.len(), 1000);
    assert!(tagged.iter().all(|(i, _)| *i == 0));
}

#[test]
fn custom_grouping_uses_the_function() {
    let tagged = run_tagged(|job, numbers| {
        job.operator(
            "tag",
            3,
            TagInstance::default(),
            numbers.partition_by(|v: &u64, n: u32| (*v % u64::from(n)) as u32),
        )
    });
    assert!(tagged.iter().all(|(i, v)| u64::from(*i) == v % 3));
}

#[test]
fn forward_grouping_keeps_instance_index_and_fuses() {
    let mut job = JobBuilder::new("forward");
    let numbers = job.source("numbers", 2, VecSource::new((0..100u64).collect()));
    let tagged = job.operator("tag", 2, TagInstance::default(), numbers.forward());
    let sink = CollectSink::new();
    job.sink("sink", 2, sink.clone(), tagged);
    job.build().unwrap().run().unwrap();
    // VecSource instance w emits the indices i with i % 2 == w; forward keeps
    // them on instance w all the way to the sink.
    for (instance, record) in sink.records() {
        assert_eq!(u64::from(record.value.0), record.value.1 % 2);
        assert_eq!(instance, record.value.0);
    }
}

#[test]
fn forward_between_different_parallelism_is_rejected() {
    let mut job = JobBuilder::new("bad forward");
    let numbers = job.source("numbers", 2, VecSource::new(vec![1u64]));
    job.sink("sink", 3, CollectSink::new(), numbers.forward());
    let error = job.build().err().unwrap();
    assert!(
        error
            .to_string()
            .contains("forward needs equal parallelism"),
        "{error}"
    );
}
