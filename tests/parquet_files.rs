//! Parquet files, exactly once: a job writes them with checkpoints, fails
//! after one and resumes; pyarrow (an independent reader) finds every row
//! once with its type, and the Parquet source reads them back at other
//! parallelisms, also across a restore; partitioned into Hive folders, a
//! checkpoint staged in them and never completed is discarded.
//!
//! ```text
//! eval "$(scripts/pyarrow-reader.sh)"
//! cargo test --features parquet --test parquet_files
//! ```

#![cfg(feature = "parquet")]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use streamwork::prelude::*;
use support::{Held, dir, exactly_once};

#[derive(Clone, Debug, PartialEq, PartialOrd, serde::Serialize, serde::Deserialize)]
struct Sale {
    id: i64,
    customer: String,
    amount: f64,
    coupon: Option<String>,
    paid: bool,
}

fn sale(i: u64) -> Sale {
    Sale {
        id: i as i64 - 5_000,
        customer: format!("customer \"{}\" ✓", i % 97),
        amount: match i % 1_000 {
            7 => f64::NAN,
            8 => f64::INFINITY,
            n => n as f64 * 0.25,
        },
        coupon: i.is_multiple_of(3).then(|| format!("C{i}")),
        paid: i.is_multiple_of(2),
    }
}

const SALES: u64 = 20_000;

/// What python `script` prints with pyarrow importable, given `dir`; or
/// `None` after saying the check is skipped (never under CI).
fn pyarrow(script: &str, dir: &Path) -> Option<String> {
    let Ok(path) = std::env::var("STREAMWORK_PYARROW_PATH") else {
        let missing = "no pyarrow (eval \"$(scripts/pyarrow-reader.sh)\")";
        assert!(
            std::env::var_os("CI").is_none(),
            "{missing}: under CI every Parquet test runs"
        );
        println!("skipped the independent reader: {missing}");
        return None;
    };
    let out = Command::new("python3")
        .env("PYTHONPATH", path)
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "pyarrow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// pyarrow's reading of the files in `dir`: the schema's types, then one
/// line per row (`id|customer|amount|coupon|paid`), sorted.
fn read_by_pyarrow(dir: &Path) -> Option<(String, Vec<String>)> {
    let script = r#"
import sys, pyarrow.dataset as ds
table = ds.dataset(sys.argv[1], format="parquet", exclude_invalid_files=False).to_table()
print(",".join(f"{f.name}:{f.type}" for f in table.schema))
rows = sorted("|".join(str(v) for v in row.values()) for row in table.to_pylist())
print("\n".join(rows))
"#;
    let text = pyarrow(script, dir)?;
    let mut lines = text.lines();
    let schema = lines.next().unwrap_or_default().to_string();
    Some((schema, lines.map(str::to_string).collect()))
}

/// A sale as pyarrow prints it.
fn python_row(s: &Sale) -> String {
    let amount = if s.amount.is_nan() {
        "nan".to_string()
    } else if s.amount.is_infinite() {
        "inf".to_string()
    } else {
        format!("{:?}", s.amount)
    };
    let coupon = s.coupon.clone().unwrap_or_else(|| "None".into());
    let paid = if s.paid { "True" } else { "False" };
    format!("{}|{}|{amount}|{coupon}|{paid}", s.id, s.customer)
}

/// Armed, fails once at sale id 0: the writing job's, then the reading
/// job's failure.
static ARMED: AtomicBool = AtomicBool::new(false);

fn fail_once_at_zero(s: Sale) -> Sale {
    if s.id == 0 && ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    s
}

/// Rows the reading job has seen, all instances together.
static READ: AtomicU64 = AtomicU64::new(0);

/// Armed, the reading job fails once at its `READ_FAILS_AT`-th row. Each
/// held source instance reads one batch (at most `DEFAULT_BATCH_SIZE`
/// rows) and then waits for a checkpoint to complete, so with at most
/// three instances that row comes after a complete checkpoint, however the
/// files were cut and whatever the threads' timing.
fn fail_once_past_the_hold(s: Sale) -> Sale {
    const READ_FAILS_AT: u64 = 4 * streamwork::core::collector::DEFAULT_BATCH_SIZE as u64;
    if READ.fetch_add(1, Ordering::SeqCst) + 1 == READ_FAILS_AT
        && ARMED.swap(false, Ordering::SeqCst)
    {
        panic!("injected failure after a checkpoint");
    }
    s
}

/// A sink that fails once, armed, right after staging its second
/// checkpoint: that checkpoint never completes, and what it staged (in
/// every partition folder) must be discarded by the restore.
#[derive(Clone)]
struct FailsAfterStaging<S> {
    inner: S,
    staged: u32,
}

static STAGING_ARMED: AtomicBool = AtomicBool::new(false);

impl<S: Sink> Sink for FailsAfterStaging<S> {
    type In = S::In;

    fn exactly_once(&self) -> bool {
        self.inner.exactly_once()
    }

    fn stages_locally(&self) -> Option<String> {
        self.inner.stages_locally()
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.inner.open(ctx)
    }

    fn write(&mut self, record: Record<S::In>) -> Result<(), ConnectorError> {
        self.inner.write(record)
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.inner.pre_commit(checkpoint)?;
        self.staged += 1;
        if self.staged == 2 && STAGING_ARMED.swap(false, Ordering::SeqCst) {
            return Err(ConnectorError::user("injected failure after staging"));
        }
        Ok(())
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.inner.commit(checkpoint)
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.inner.close()
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        self.inner.restore(restore)
    }
}

impl<S: Sink> streamwork::core::checkpoint::Transactional for FailsAfterStaging<S> {}

fn by_id(sales: &mut [Sale]) {
    sales.sort_by_key(|s| s.id);
}

#[test]
fn parquet_written_exactly_once_across_a_failure_reads_back_whole_with_its_types() {
    let root = dir("parquet");
    let out = root.join("sales");
    let checkpoints = root.join("checkpoints");
    let source = Held::new(GeneratorSource::new(sale).take(SALES), 1);
    ARMED.store(true, Ordering::SeqCst);
    let report = job! {
        delivery exactly_once;
        source sales[2] = source;
        operator checked[2] = |s: Sale| fail_once_at_zero(s) <- sales;
        sink out[2] = FileSink::<Sale>::parquet(&out).row_group_rows(1_000) <- checked;
    }
    .unwrap()
    .run_with(exactly_once(&checkpoints, 1))
    .unwrap();
    assert_eq!(report.restarts, 1, "the failure fired");
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert!(files.iter().all(|f| f.ends_with(".parquet")), "{files:?}");
    assert!(files.len() >= 2, "{files:?}");

    let mut expected: Vec<Sale> = (0..SALES).map(sale).collect();
    by_id(&mut expected);
    if let Some((schema, rows)) = read_by_pyarrow(&out) {
        assert_eq!(
            schema,
            "id:int64,customer:string,amount:double,coupon:string,paid:bool"
        );
        let mut want: Vec<String> = expected.iter().map(python_row).collect();
        want.sort();
        assert_eq!(rows.len(), want.len(), "every row once");
        assert_eq!(rows, want);
    }

    // Read back by the source, failed after a checkpoint and resumed at
    // another parallelism.
    for (first, second) in [(3, 1), (1, 2)] {
        let got = CollectSink::new();
        let reread = root.join(format!("reread-{first}-{second}"));
        let run = |p: u32| {
            job! {
                delivery exactly_once;
                source sales[p] = Held::new(FileSource::<Sale>::parquet(&out), 1);
                operator checked[p] = |s: Sale| fail_once_past_the_hold(s) <- sales;
                sink kept = got.clone().transactional() <- checked;
            }
            .unwrap()
            .run_with(exactly_once(&reread, 0))
        };
        READ.store(0, Ordering::SeqCst);
        ARMED.store(true, Ordering::SeqCst);
        let error = run(first).expect_err("the injected failure");
        assert!(error.to_string().contains("injected failure"), "{error}");
        let report = run(second).unwrap();
        assert!(report.recovery.restored_from.is_some());
        let mut values = got.values();
        by_id(&mut values);
        assert_eq!(
            values.len(),
            expected.len(),
            "{first} → {second}: every row once"
        );
        for (g, e) in values.iter().zip(&expected) {
            assert!(
                g == e || (g.amount.is_nan() && e.amount.is_nan() && g.id == e.id),
                "{g:?} != {e:?}"
            );
        }
    }
}

/// pyarrow's reading of a Hive-partitioned directory: rows, and rows whose
/// folder columns disagree with their fields.
fn partitioned_by_pyarrow(dir: &Path) -> Option<(u64, u64)> {
    let script = r#"
import sys, pyarrow.dataset as ds
table = ds.dataset(sys.argv[1], format="parquet", partitioning="hive").to_table()
rows = table.to_pylist()
wrong = sum(1 for r in rows if r["bucket"] != r["id"] % 3 or str(r["paid"]).lower() != str(r["settled"]).lower())
print(len(rows), wrong)
"#;
    let text = pyarrow(script, dir)?;
    let mut numbers = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    Some((numbers.next().unwrap(), numbers.next().unwrap()))
}

#[test]
fn partitioned_parquet_lands_in_hive_folders_exactly_once_across_a_failure() {
    let root = dir("parquet-partitioned");
    let out = root.join("sales");
    let checkpoints = root.join("checkpoints");
    // The first run fails right after staging its second checkpoint; the
    // second, at parallelism 1, restores the one before.
    STAGING_ARMED.store(true, Ordering::SeqCst);
    let run = |p: u32| {
        let sink = FailsAfterStaging {
            inner: FileSink::<Sale>::parquet(&out).partition_by(|s: &Sale, _| {
                format!("settled={}/bucket={}", s.paid, s.id.rem_euclid(3))
            }),
            staged: 0,
        };
        let source = Held::new(GeneratorSource::new(sale).take(SALES), 1);
        job! {
            delivery exactly_once;
            source sales[p] = source;
            sink out[p] = sink <- sales;
        }
        .unwrap()
        .run_with(exactly_once(&checkpoints, 0))
    };
    let error = run(2).expect_err("the injected failure");
    assert!(
        error.to_string().contains("injected failure after staging"),
        "{error}"
    );
    let report = run(1).unwrap();
    assert!(report.recovery.restored_from.is_some());
    // Nothing staged is left behind, in any folder, by any old instance.
    let mut left = Vec::new();
    let mut folders = vec![out.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            } else if name.contains(".staged-") || name.ends_with(".inprogress") {
                left.push(entry.path());
            }
        }
    }
    assert!(left.is_empty(), "staged files left: {left:?}");
    for folder in ["settled=true/bucket=0", "settled=false/bucket=2"] {
        assert!(out.join(folder).is_dir(), "{folder}");
    }
    if let Some((rows, wrong)) = partitioned_by_pyarrow(&out) {
        assert_eq!((rows, wrong), (SALES, 0));
    }
    // The source reads the folders too.
    let got = CollectSink::new();
    job! {
        source sales[2] = FileSource::<Sale>::parquet(&out);
        sink kept = got.clone() <- sales;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut ids: Vec<i64> = got.values().iter().map(|s| s.id).collect();
    ids.sort_unstable();
    let want: Vec<i64> = (0..SALES).map(|i| i as i64 - 5_000).collect();
    assert_eq!(ids, want);

    // A folder that is not plain is refused by name.
    let bad =
        FileSink::<Sale>::parquet(root.join("bad")).partition_by(|_: &Sale, _| "../up".into());
    let error = job! {
        source sales = GeneratorSource::new(sale).take(3);
        sink out = bad <- sales;
    }
    .unwrap()
    .run()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("partition `../up` is not a plain relative folder"),
        "{error}"
    );
}

/// Parquet written to object storage (moto) across a failure and an empty
/// directory on "another machine", checkpoints in the same store: the
/// objects, read back, hold every row once.
#[cfg(feature = "s3")]
#[test]
fn parquet_on_object_storage_across_a_failure_holds_every_row_once() {
    use std::sync::Arc;
    use streamwork::connectors::file::StorePrefix;
    use streamwork::state::{CheckpointStore, ObjectStoreCheckpoints};

    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    static STORE_ARMED: AtomicBool = AtomicBool::new(false);
    fn fail_once(s: Sale) -> Sale {
        if s.id == 1_000 && STORE_ARMED.swap(false, Ordering::SeqCst) {
            panic!("injected failure after a checkpoint");
        }
        s
    }
    let root = dir("parquet-s3");
    let name = root.file_name().unwrap().to_str().unwrap().to_string();
    let (out, checkpoints) = (format!("{name}/sales"), format!("{name}/checkpoints"));
    let store =
        Arc::new(ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &checkpoints).unwrap());
    let run = |p: u32, machine: &str| {
        let prefix = StorePrefix::s3(Some(&endpoint), &bucket, &out).unwrap();
        let sink = FileSink::<Sale>::parquet("").into_store(prefix);
        let source = Held::new(GeneratorSource::new(sale).take(SALES), 1);
        let options = support::exactly_once_stored(&root.join(machine), store.clone(), 0);
        job! {
            delivery exactly_once;
            source sales[p] = source;
            operator checked[p] = |s: Sale| fail_once(s) <- sales;
            sink out[p] = sink <- checked;
        }
        .unwrap()
        .run_with(options)
    };
    STORE_ARMED.store(true, Ordering::SeqCst);
    let error = run(2, "one").expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    let report = run(3, "two").unwrap();
    assert!(report.recovery.restored_from.is_some());

    // The objects, downloaded, read by the Parquet source (and pyarrow).
    let objects = ObjectStoreCheckpoints::s3(Some(&endpoint), &bucket, &out).unwrap();
    let local = root.join("downloaded");
    std::fs::create_dir_all(&local).unwrap();
    for (object, _) in objects.list().unwrap() {
        assert!(object.ends_with(".parquet"), "{object}");
        std::fs::write(local.join(&object), objects.download(&object).unwrap()).unwrap();
    }
    let got = CollectSink::new();
    job! {
        source sales[2] = FileSource::<Sale>::parquet(&local);
        sink kept = got.clone() <- sales;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut ids: Vec<i64> = got.values().iter().map(|s| s.id).collect();
    ids.sort_unstable();
    let want: Vec<i64> = (0..SALES).map(|i| i as i64 - 5_000).collect();
    assert_eq!(ids, want, "every row once");
    if let Some((_, rows)) = read_by_pyarrow(&local) {
        assert_eq!(rows.len() as u64, SALES);
    }
}

/// The `s3_parquet_sink` example killed with SIGKILL once it has put
/// objects, then carried on by a process with an empty working directory
/// of its own at another parallelism (1, then 3): the bucket holds every
/// sale once, in its region's Hive folder, read back from the bucket by
/// the Parquet source, with no upload left in progress.
#[cfg(feature = "s3")]
#[test]
fn the_s3_parquet_example_killed_and_resumed_elsewhere_writes_every_sale_once() {
    use std::process::Stdio;
    use streamwork::connectors::file::StorePrefix;

    let Some((endpoint, bucket)) = support::s3_server() else {
        return;
    };
    let example = support::example(
        "s3_parquet_sink",
        "cargo build --features s3,parquet --example s3_parquet_sink",
    );
    let sales = 2_000_000u64;
    for (first, second) in [(2u32, 1u32), (1, 3)] {
        let root = dir("parquet-s3-kill");
        let prefix = root.file_name().unwrap().to_str().unwrap().to_string();
        let objects =
            StorePrefix::s3(Some(&endpoint), &bucket, &format!("{prefix}/sales")).unwrap();
        let start = |p: u32, machine: &str| {
            Command::new(&example)
                .env("STREAMWORK_S3_ENDPOINT", &endpoint)
                .env("STREAMWORK_S3_BUCKET", &bucket)
                .args(["--sales", &sales.to_string(), "--prefix", &prefix])
                .args(["--parallelism", &p.to_string()])
                .arg("--work")
                .arg(root.join(machine))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starting s3_parquet_sink")
        };
        let mut killed = start(first, "one");
        assert!(
            support::kill_once_visible(&mut killed, || !objects.list().unwrap().is_empty()),
            "{first} → {second}: the first process ended before its kill"
        );
        support::resumed_from_a_checkpoint(start(second, "two"));

        assert!(objects.uploads_in_progress().unwrap().is_empty());
        let listed = objects.list().unwrap();
        for (name, _) in &listed {
            let region = name.split('/').next().unwrap();
            assert!(
                ["region=eu", "region=us", "region=asia"].contains(&region),
                "{name}"
            );
        }
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        struct Sold {
            id: i64,
            region: String,
        }
        let got = CollectSink::new();
        job! {
            source sold[2] = FileSource::<Sold>::parquet("").from_store(objects.clone());
            sink kept = got.clone() <- sold;
        }
        .unwrap()
        .run()
        .unwrap();
        let values = got.values();
        assert!(
            values
                .iter()
                .all(|s| s.region == ["eu", "us", "asia"][(s.id % 3) as usize]),
            "each sale in its region's folder"
        );
        let mut ids: Vec<i64> = values.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(got.values().len() as u64, sales, "{first} → {second}: rows");
        assert_eq!(
            ids.len() as u64,
            sales,
            "{first} → {second}: each sale once"
        );
    }
}

/// The builder keeps the promise `job!` keeps: an exactly-once job built
/// with `JobBuilder::exactly_once` (which accepts only transactional sinks
/// at compile time) writes Parquet across a failure and a restart, every
/// row once.
#[test]
fn the_builder_writes_parquet_exactly_once_across_a_failure() {
    static BUILDER_ARMED: AtomicBool = AtomicBool::new(false);
    let root = dir("parquet-builder");
    let out = root.join("sales");
    BUILDER_ARMED.store(true, Ordering::SeqCst);
    let mut job = JobBuilder::new("parquet").exactly_once();
    let sales = job.source(
        "sales",
        2,
        Held::new(GeneratorSource::new(sale).take(SALES), 1),
    );
    job.flow(sales)
        .map(|s: Sale| {
            if s.id == 0 && BUILDER_ARMED.swap(false, Ordering::SeqCst) {
                panic!("injected failure after a checkpoint");
            }
            s
        })
        .sink("out", FileSink::<Sale>::parquet(&out));
    let report = job
        .build()
        .unwrap()
        .run_with(exactly_once(&root.join("checkpoints"), 1))
        .unwrap();
    assert_eq!(report.restarts, 1, "the failure fired");
    let got = CollectSink::new();
    job! {
        source sales[2] = FileSource::<Sale>::parquet(&out);
        sink kept = got.clone() <- sales;
    }
    .unwrap()
    .run()
    .unwrap();
    let mut ids: Vec<i64> = got.values().iter().map(|s| s.id).collect();
    ids.sort_unstable();
    let want: Vec<i64> = (0..SALES).map(|i| i as i64 - 5_000).collect();
    assert_eq!(ids, want, "every row once");
}

/// A file that is not Parquet, and a damaged checkpointed position, are
/// refused by name, never a panic.
#[test]
fn the_parquet_source_refuses_a_file_that_is_not_parquet_and_a_damaged_position() {
    let root = dir("parquet-bad");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("sales.parquet"), b"PAR1 but not really").unwrap();
    let error = job! {
        source sales = FileSource::<Sale>::parquet(&root);
        sink kept = CollectSink::new() <- sales;
    }
    .unwrap()
    .run()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("sales.parquet cannot be read as Parquet"),
        "{error}"
    );

    use streamwork::core::checkpoint::RestoredPart;
    let mut source = FileSource::<Sale>::parquet(&root);
    let restore = Restore {
        records: None,
        component: "sales",
        checkpoint: CheckpointId::new(3),
        is_final: false,
        ended: Vec::new(),
        instance: InstanceIdx(0),
        parallelism: 1,
        key_groups: KeyGroups::DEFAULT,
        parts: vec![RestoredPart {
            part: InstanceIdx(0),
            schema: 1,
            bytes: b"{\"plan\": [",
        }],
    };
    let error = source.restore(&restore).unwrap_err().to_string();
    assert!(error.contains("is damaged"), "{error}");
}
