//! Sinks driven directly, without a runtime.

use streamwork_connectors::{CollectSink, FileSink};
use streamwork_core::{InstanceContext, KeyGroups, Record, Sink};

#[test]
fn file_sink_writes_one_part_per_instance() {
    let dir = std::env::temp_dir().join(format!("streamwork-sink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for instance in 0..2u32 {
        let mut sink = FileSink::new(&dir, |v: &u64, line: &mut Vec<u8>| {
            line.extend_from_slice(v.to_string().as_bytes())
        });
        sink.open(&InstanceContext::new(
            "files",
            instance,
            2,
            KeyGroups::DEFAULT,
        ))
        .unwrap();
        sink.write(Record::new(u64::from(instance) * 10)).unwrap();
        sink.write(Record::new(u64::from(instance) * 10 + 1))
            .unwrap();
        sink.close().unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("part-0")).unwrap(),
        "0\n1\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("part-1")).unwrap(),
        "10\n11\n"
    );
}

#[test]
fn single_file_sink_refuses_parallel_instances() {
    let path = std::env::temp_dir().join(format!("streamwork-single-{}", std::process::id()));
    let mut sink = FileSink::new(&path, |v: &u64, line: &mut Vec<u8>| {
        line.extend_from_slice(v.to_string().as_bytes())
    })
    .single_file();
    let error = sink
        .open(&InstanceContext::new("out", 0, 2, KeyGroups::DEFAULT))
        .unwrap_err();
    assert!(error.to_string().contains("parallelism 2"), "{error}");
}

#[test]
fn collect_sink_keeps_instance_and_order() {
    let sink = CollectSink::new();
    let mut instance = sink.clone();
    instance
        .open(&InstanceContext::new("c", 1, 2, KeyGroups::DEFAULT))
        .unwrap();
    instance.write(Record::new("a")).unwrap();
    instance.write(Record::new("b")).unwrap();
    assert!(sink.values().is_empty(), "records are published on flush");
    instance.close().unwrap();
    assert_eq!(sink.values_of_instance(1), vec!["a", "b"]);
}
