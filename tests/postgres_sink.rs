//! The exactly-once Postgres sink against a real server
//! (`scripts/postgres-test-server.sh`): the example killed -9 at moments
//! chosen by what it has committed, resumed at other parallelisms, ends
//! with the tables of an uninterrupted run; a transaction prepared and
//! left by a crash is committed or rolled back by whoever restores; a run
//! from before committed output is refused; a row the database refuses
//! fails the job naming the table and the statement.
//!
//! ```text
//! eval "$(scripts/postgres-test-server.sh start)"
//! cargo build --features postgres --example postgres_upserts
//! cargo test --features postgres --test postgres_sink
//! ```

#![cfg(feature = "postgres")]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use postgres::{Client, NoTls};
use streamwork::connectors::postgres::PostgresSink;
use streamwork::core::{CheckpointId, InstanceContext, InstanceIdx, Record, Restore};
use streamwork::prelude::*;

/// The test server (`STREAMWORK_POSTGRES_URL`), or `None` after saying the
/// test is skipped. Under CI a missing server fails the test: CI starts it.
fn url() -> Option<String> {
    match std::env::var("STREAMWORK_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let missing =
                "no Postgres (set STREAMWORK_POSTGRES_URL, see scripts/postgres-test-server.sh)";
            assert!(
                std::env::var_os("CI").is_none(),
                "{missing}: under CI every Postgres test runs"
            );
            println!("skipped: {missing}");
            None
        }
    }
}

fn client(url: &str) -> Client {
    Client::connect(url, NoTls).expect("connecting to the test server")
}

/// A name no other run uses, for tables and sink ids.
/// `name` made unique to this run (a counter of this process, as the clock
/// alone can give two tests running at once the same reading).
fn unique(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{name}_{}_{}_{n}",
        std::process::id(),
        nanos % 1_000_000_000
    )
}

fn example() -> PathBuf {
    support::example(
        "postgres_upserts",
        "cargo build --features postgres --example postgres_upserts",
    )
}

/// Starts the example over `input` at `parallelism`.
fn start(url: &str, prefix: &str, input: &Path, checkpoints: &Path, parallelism: u32) -> Child {
    Command::new(example())
        .args(["--url", url, "--prefix", prefix, "--interval-ms", "20"])
        .arg("--input")
        .arg(input)
        .arg("--checkpoints")
        .arg(checkpoints)
        .args(["--parallelism", &parallelism.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting postgres_upserts")
}

/// The newest checkpoint the example's sinks committed, by the progress table.
fn committed(client: &mut Client, prefix: &str) -> i64 {
    let pattern = format!("{prefix}%");
    client
        .query_one(
            "SELECT coalesce(min(checkpoint), 0) FROM (SELECT max(checkpoint) AS checkpoint \
             FROM streamwork_sink_progress WHERE sink LIKE $1 GROUP BY sink) AS sinks",
            &[&pattern],
        )
        .map(|row| row.get(0))
        .unwrap_or(0)
}

/// Transactions the example's sinks prepared and have not committed yet.
fn prepared(client: &mut Client, prefix: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1",
            &[&format!("streamwork:{prefix}%")],
        )
        .map(|row| row.get(0))
        .unwrap_or(0)
}

/// Kills the example with SIGKILL once both its sinks have committed
/// checkpoint `at`, at a moment a transaction is prepared and not yet
/// committed (between pre-commit and commit), or once `at + 20` is
/// committed; whether it was killed before it ended.
fn kill_after(child: &mut Child, client: &mut Client, prefix: &str, at: i64) -> bool {
    for _ in 0..60_000 {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        let done = committed(client, prefix);
        if (done >= at && prepared(client, prefix) > 0) || done >= at + 20 {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the example committed no checkpoint {at} within a minute");
}

/// The words of the input and the count of each, as the example reads it.
fn expected(input: &Path) -> (i64, BTreeMap<String, i64>) {
    let text = std::fs::read_to_string(input).unwrap();
    let mut counts = BTreeMap::new();
    let mut words = 0;
    for word in text.split_whitespace() {
        *counts.entry(word.to_string()).or_insert(0) += 1;
        words += 1;
    }
    (words, counts)
}

fn tables(client: &mut Client, prefix: &str) -> (i64, i64, BTreeMap<String, i64>) {
    let seen: i64 = client
        .query_one(&format!("SELECT count(*) FROM {prefix}words_seen"), &[])
        .unwrap()
        .get(0);
    let distinct: i64 = client
        .query_one(
            &format!("SELECT count(DISTINCT (line, position)) FROM {prefix}words_seen"),
            &[],
        )
        .unwrap()
        .get(0);
    let counts = client
        .query(&format!("SELECT word, count FROM {prefix}word_counts"), &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    (seen, distinct, counts)
}

#[test]
fn killed_twice_and_resumed_at_other_parallelisms_the_tables_equal_an_uninterrupted_run() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let root = support::dir("postgres-kill");
    std::fs::create_dir_all(&root).unwrap();
    let input = root.join("input.txt");
    let words = [
        "stream", "table", "window", "barrier", "sink", "key", "state",
    ];
    let text: String = (0..60_000u64)
        .map(|i| {
            let line: Vec<&str> = (0..1 + i % 5)
                .map(|j| words[((i * 5 + j * 3) % 7) as usize])
                .collect();
            line.join(" ") + "\n"
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    let (words_read, counts) = expected(&input);
    // Parallelism before the first kill, between the kills, at the end.
    for (trial, parallelism) in [[2, 3, 1], [1, 3, 3]].into_iter().enumerate() {
        let prefix = unique(&format!("kill{trial}"));
        let checkpoints = root.join(format!("checkpoints-{trial}"));
        let mut first = start(&url, &prefix, &input, &checkpoints, parallelism[0]);
        let killed_first = kill_after(&mut first, &mut db, &prefix, 2);
        let mut second = start(&url, &prefix, &input, &checkpoints, parallelism[1]);
        let at = committed(&mut db, &prefix) + 3;
        let killed_second = kill_after(&mut second, &mut db, &prefix, at);
        let last = start(&url, &prefix, &input, &checkpoints, parallelism[2]);
        let out = last.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "trial {trial}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            killed_first,
            "trial {trial}: the first run ended before its kill"
        );
        let (seen, distinct, got) = tables(&mut db, &prefix);
        assert_eq!(
            (seen, distinct),
            (words_read, words_read),
            "trial {trial}: every word appended once (second kill: {killed_second})"
        );
        assert_eq!(got, counts, "trial {trial}: the upserted counts");
        assert_eq!(
            prepared(&mut db, &prefix),
            0,
            "trial {trial}: prepared transactions left behind"
        );
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
struct Row {
    id: i64,
    name: String,
}

fn context(instance: u32, parallelism: u32) -> InstanceContext {
    support::sink_context(instance, parallelism)
}

fn restore(checkpoint: u64, instance: u32, parallelism: u32) -> Restore<'static> {
    support::sink_restore(checkpoint, instance, parallelism, Vec::new())
}

fn rows(db: &mut Client, table: &str) -> Vec<(i64, String)> {
    db.query(&format!("SELECT id, name FROM {table} ORDER BY id"), &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

fn write(sink: &mut PostgresSink<Row>, ids: std::ops::Range<i64>, name: &str) {
    for id in ids {
        Sink::write(
            sink,
            Record::new(Row {
                id,
                name: name.to_string(),
            }),
        )
        .unwrap();
    }
}

#[test]
fn a_transaction_prepared_before_a_crash_is_committed_or_rolled_back_by_the_restore() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("prepared");
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL)"
    ))
    .unwrap();
    let sink = PostgresSink::<Row>::upsert(&url, &table, &["id"])
        .id(&table)
        .batch_rows(7);
    // Instance 1 of 2 prepares checkpoints 1 (committed) and 2 (prepared
    // only), and checkpoint 3, and dies.
    let mut first = sink.clone();
    Sink::open(&mut first, &context(1, 2)).unwrap();
    write(&mut first, 0..20, "one");
    Sink::pre_commit(&mut first, CheckpointId::new(1)).unwrap();
    Sink::commit(&mut first, CheckpointId::new(1)).unwrap();
    write(&mut first, 10..30, "two");
    Sink::pre_commit(&mut first, CheckpointId::new(2)).unwrap();
    drop(first);
    assert_eq!(
        rows(&mut db, &table).len(),
        20,
        "checkpoint 2 is not visible yet"
    );
    let prepared: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1",
            &[&format!("streamwork:{table}:%")],
        )
        .unwrap()
        .get(0);
    assert_eq!(prepared, 1, "checkpoint 2 outlives its connection");

    // Restored from checkpoint 2 at parallelism 1: instance 0 finishes
    // old instance 1's transaction.
    let mut second = sink.clone();
    Sink::open(&mut second, &context(0, 1)).unwrap();
    Sink::restore(&mut second, &restore(2, 0, 1)).unwrap();
    let got = rows(&mut db, &table);
    assert_eq!(got.len(), 30);
    assert!(got[10..].iter().all(|(_, name)| name == "two"), "{got:?}");

    // Checkpoint 3 prepared and lost with its process: a restore from 2
    // rolls it back.
    write(&mut second, 0..5, "three");
    Sink::pre_commit(&mut second, CheckpointId::new(3)).unwrap();
    drop(second);
    let mut third = sink.clone();
    Sink::open(&mut third, &context(0, 1)).unwrap();
    Sink::restore(&mut third, &restore(2, 0, 1)).unwrap();
    assert!(
        rows(&mut db, &table)[..5]
            .iter()
            .all(|(_, name)| name == "one")
    );

    // Committed output past the checkpoint a run starts from is refused.
    write(&mut third, 0..5, "four");
    Sink::pre_commit(&mut third, CheckpointId::new(4)).unwrap();
    Sink::commit(&mut third, CheckpointId::new(4)).unwrap();
    drop(third);
    let mut fourth = sink.clone();
    Sink::open(&mut fourth, &context(0, 1)).unwrap();
    let error = Sink::restore(&mut fourth, &restore(2, 0, 1))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("committed the output of checkpoint 4"),
        "{error}"
    );
    assert!(error.contains("written twice"), "{error}");
}

#[test]
fn a_row_the_database_refuses_fails_the_job_naming_the_table_and_the_statement() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("refused");
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, name varchar(3) NOT NULL)"
    ))
    .unwrap();
    let values = vec![
        Row {
            id: 1,
            name: "ok".into(),
        },
        Row {
            id: 2,
            name: "far too long".into(),
        },
    ];
    let error = job! {
        source rows = VecSource::new(values);
        sink out = PostgresSink::<Row>::append(&url, &table) <- rows;
    }
    .unwrap()
    .run()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains(&format!("table \"{table}\" refused")),
        "{error}"
    );
    assert!(error.contains("json_populate_recordset"), "{error}");
    assert!(error.contains("character varying(3)"), "{error}");
    assert!(rows(&mut db, &table).is_empty(), "nothing committed");

    // A table that is not there, and a field that is not a column, are
    // refused at start.
    let missing = job! {
        source rows = VecSource::new(vec![Row { id: 1, name: "a".into() }]);
        sink out = PostgresSink::<Row>::append(&url, "no_such_table") <- rows;
    }
    .unwrap()
    .run()
    .unwrap_err()
    .to_string();
    assert!(
        missing.contains("`no_such_table` does not exist"),
        "{missing}"
    );
    let narrow = unique("narrow");
    db.batch_execute(&format!("CREATE TABLE {narrow} (id bigint)"))
        .unwrap();
    let unknown = job! {
        source rows = VecSource::new(vec![Row { id: 1, name: "a".into() }]);
        sink out = PostgresSink::<Row>::append(&url, &narrow) <- rows;
    }
    .unwrap()
    .run()
    .unwrap_err()
    .to_string();
    assert!(
        unknown.contains("field `name` is not a column"),
        "{unknown}"
    );
}

#[derive(Clone, Debug, serde::Serialize)]
struct Extreme {
    id: i64,
    x: f64,
    r: f32,
    s: String,
}

#[test]
fn extreme_values_arrive_as_they_are() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("extreme");
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, x float8, r real, s text)"
    ))
    .unwrap();
    let values = vec![
        Extreme {
            id: i64::MIN,
            x: f64::NAN,
            r: f32::INFINITY,
            s: "it's \"quoted\"".into(),
        },
        Extreme {
            id: i64::MAX,
            x: f64::NEG_INFINITY,
            r: f32::MIN_POSITIVE,
            s: "✓ ünïcode, \\ back".into(),
        },
        Extreme {
            id: 0,
            x: f64::MAX,
            r: -0.0,
            s: String::new(),
        },
    ];
    job! {
        source rows = VecSource::new(values.clone());
        sink out = PostgresSink::<Extreme>::upsert(&url, &table, &["id"]) <- rows;
    }
    .unwrap()
    .run()
    .unwrap();
    let got: Vec<(i64, f64, f32, String)> = db
        .query(&format!("SELECT id, x, r, s FROM {table} ORDER BY id"), &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
    assert_eq!(got.len(), 3);
    let (min, zero, max) = (&got[0], &got[1], &got[2]);
    assert_eq!(min.0, i64::MIN);
    assert!(min.1.is_nan(), "NaN, not NULL: {min:?}");
    assert_eq!(min.2, f32::INFINITY);
    assert_eq!(min.3, values[0].s);
    assert_eq!(
        (max.0, max.1, max.2),
        (i64::MAX, f64::NEG_INFINITY, f32::MIN_POSITIVE)
    );
    assert_eq!(max.3, values[1].s);
    assert_eq!((zero.1, zero.3.as_str()), (f64::MAX, ""));
}

/// An instance that ended its input prepares its final output, and a later
/// checkpoint holding its final part completes before a crash: whoever
/// restores that checkpoint commits the final output (it is covered), and
/// does not take it for output from after the restore.
#[test]
fn the_final_output_of_an_instance_that_had_ended_is_committed_by_the_restore() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("ended");
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL)"
    ))
    .unwrap();
    let sink = PostgresSink::<Row>::append(&url, &table).id(&table);
    let mut ended = sink.clone();
    Sink::open(&mut ended, &context(1, 2)).unwrap();
    write(&mut ended, 0..10, "last");
    Sink::pre_commit(&mut ended, CheckpointId::FINAL).unwrap();
    drop(ended);
    assert!(rows(&mut db, &table).is_empty());
    let mut after = sink.clone();
    Sink::open(&mut after, &context(0, 1)).unwrap();
    let mut from = restore(2, 0, 1);
    from.ended = vec![InstanceIdx(1)];
    Sink::restore(&mut after, &from).unwrap();
    assert_eq!(
        rows(&mut db, &table).len(),
        10,
        "the ended instance's output"
    );
    // Restored again from the same checkpoint: nothing twice, no refusal.
    let mut again = sink.clone();
    Sink::open(&mut again, &context(0, 1)).unwrap();
    Sink::restore(&mut again, &from).unwrap();
    assert_eq!(rows(&mut db, &table).len(), 10);
}

/// A server with prepared transactions off (`max_prepared_transactions =
/// 0`, the project script's second cluster) is refused at start, naming
/// the setting and what to set it to.
#[test]
fn a_server_without_prepared_transactions_is_refused_naming_the_setting() {
    let Some(_) = url() else { return };
    let url = std::env::var("STREAMWORK_POSTGRES_NO_PREPARED_URL")
        .expect("STREAMWORK_POSTGRES_NO_PREPARED_URL: start scripts/postgres-test-server.sh");
    let mut db = client(&url);
    let table = unique("no_prepared");
    db.batch_execute(&format!("CREATE TABLE {table} (id bigint, name text)"))
        .unwrap();
    let mut sink = PostgresSink::<Row>::append(&url, &table);
    let error = Sink::open(&mut sink, &context(0, 1))
        .expect_err("prepared transactions are off")
        .to_string();
    assert!(error.contains("max_prepared_transactions = 0"), "{error}");
    assert!(error.contains("set `max_prepared_transactions`"), "{error}");
}

/// Rows written after a prepared checkpoint wait for its commit in memory
/// (their upserts could wait on its locks), 64 batches at most: at the
/// bound the sink waits for the checkpoint to complete; one that does not
/// within `checkpoint_wait` fails the write, naming the checkpoint. Once
/// it completes, the sink commits it and writes on.
#[test]
fn rows_held_after_a_prepared_checkpoint_are_bounded() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use streamwork::core::checkpoint::CheckpointView;
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("held");
    db.batch_execute(&format!("CREATE TABLE {table} (id bigint, name text)"))
        .unwrap();
    let completed = Arc::new(AtomicU64::new(0));
    let ctx = context(0, 1).with_checkpoints(CheckpointView::new(completed.clone(), None));
    let mut sink = PostgresSink::<Row>::append(&url, &table)
        .id(&table)
        .batch_rows(10)
        .checkpoint_wait(Duration::ZERO);
    Sink::open(&mut sink, &ctx).unwrap();
    write(&mut sink, 0..5, "one");
    Sink::pre_commit(&mut sink, CheckpointId::new(1)).unwrap();
    // 639 rows held: under the bound of 64 batches of 10.
    write(&mut sink, 5..644, "two");
    assert_eq!(
        rows(&mut db, &table).len(),
        0,
        "checkpoint 1 is prepared only"
    );
    let error = Sink::write(
        &mut sink,
        Record::new(Row {
            id: 644,
            name: "two".into(),
        }),
    )
    .expect_err("the bound, with checkpoint 1 incomplete")
    .to_string();
    assert!(error.contains("did not complete within"), "{error}");
    assert!(error.contains("reached their bound"), "{error}");
    // Checkpoint 1 completes: the next write commits it and writes the rows.
    completed.store(1, Ordering::SeqCst);
    write(&mut sink, 645..650, "two");
    assert_eq!(rows(&mut db, &table).len(), 5, "checkpoint 1 committed");
    Sink::pre_commit(&mut sink, CheckpointId::new(2)).unwrap();
    Sink::commit(&mut sink, CheckpointId::new(2)).unwrap();
    let got = rows(&mut db, &table);
    assert_eq!(got.len(), 650, "every row once");
}

static TAGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static TAG_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Not deterministic: a record's tag is how many came before it in this
/// process, so a replay tags it differently; fails once, armed, at 7,000.
fn tag(id: i64) -> Row {
    use std::sync::atomic::Ordering;
    if id == 7_000 && TAG_ARMED.swap(false, Ordering::SeqCst) {
        panic!("injected failure after a checkpoint");
    }
    Row {
        id,
        name: TAGS.fetch_add(1, Ordering::SeqCst).to_string(),
    }
}

/// An operator that is not deterministic before the sink (a replay emits
/// other rows for the same input), a failure after a checkpoint, a run at
/// another parallelism: the appended table holds each input once, with
/// one run's tag. (An instance that reaches its end while another has
/// failed does not wait for a checkpoint that will not complete: this
/// test once took the sink's whole ten-minute wait.)
#[test]
fn a_nondeterministic_operator_before_the_sink_still_appends_each_input_once() {
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("tagged");
    db.batch_execute(&format!("CREATE TABLE {table} (id bigint, name text)"))
        .unwrap();
    let root = support::dir("postgres-tagged");
    let run = |p: u32| {
        let ids = support::Held::new(GeneratorSource::new(|i: u64| i as i64).take(20_000), 1);
        job! {
            delivery exactly_once;
            source ids[p] = ids;
            operator tagged[p] = |id: i64| tag(id) <- ids;
            sink out[p] = PostgresSink::<Row>::append(&url, &table).id(&table) <- tagged;
        }
        .unwrap()
        .run_with(support::exactly_once(&root, 0))
    };
    TAG_ARMED.store(true, std::sync::atomic::Ordering::SeqCst);
    let error = run(2).expect_err("the injected failure");
    assert!(error.to_string().contains("injected failure"), "{error}");
    let report = run(3).unwrap();
    assert!(report.recovery.restored_from.is_some());
    let row = db
        .query_one(
            &format!("SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {table}"),
            &[],
        )
        .unwrap();
    let (rows, ids, min, max): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((rows, ids, min, max), (20_000, 20_000, 0, 19_999));
}

/// A sink waiting for a prepared checkpoint to complete stops waiting
/// when the job fails (no checkpoint completes any more), well before its
/// `checkpoint_wait`.
#[test]
fn a_sink_waiting_for_a_checkpoint_stops_when_the_job_fails() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use streamwork::core::checkpoint::CheckpointView;
    let Some(url) = url() else { return };
    let mut db = client(&url);
    let table = unique("failed");
    db.batch_execute(&format!("CREATE TABLE {table} (id bigint, name text)"))
        .unwrap();
    let failed = Arc::new(AtomicBool::new(true));
    let view = CheckpointView::new(Arc::new(AtomicU64::new(0)), None).with_failure(failed);
    let mut sink = PostgresSink::<Row>::append(&url, &table).id(&table);
    Sink::open(&mut sink, &context(0, 1).with_checkpoints(view)).unwrap();
    write(&mut sink, 0..5, "one");
    Sink::pre_commit(&mut sink, CheckpointId::new(1)).unwrap();
    write(&mut sink, 5..10, "two");
    let error = Sink::pre_commit(&mut sink, CheckpointId::new(2))
        .expect_err("checkpoint 1 will not complete")
        .to_string();
    assert!(error.contains("the job failed"), "{error}");
}
