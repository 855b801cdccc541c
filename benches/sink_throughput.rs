//! What the sinks cost, exactly once: the same records written by each
//! file sink (plain, gzip, zstd; CSV, transactional), the Parquet sink, the
//! Postgres sink (appended, upserted) and, with feature `s3`, the
//! object-store sink (gzip CSV and Parquet, against the local moto server),
//! with a checkpoint every second, in interleaved rounds; each reported as
//! records per second, its median round, and as a share of the plain
//! file's.
//!
//! ```sh
//! cargo xtask bench --sinks     # starts Postgres and moto, then runs this
//! ```
//! `SINK_EVENTS` sets the records per run (default 1 000 000), `SINK_ROUNDS`
//! the rounds (default 3).

use std::path::Path;
use std::time::{Duration, Instant};

use streamwork::connectors::Compression;
use streamwork::connectors::postgres::PostgresSink;
use streamwork::prelude::*;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Sale {
    id: i64,
    customer: String,
    amount: f64,
}

fn sale(i: u64) -> Sale {
    Sale {
        id: i as i64,
        customer: format!("customer {}", i % 10_000),
        amount: (i % 1_000) as f64 * 1.25,
    }
}

/// Runs the generator into `sink` with checkpoints every second in `dir`.
fn run<S>(events: u64, sink: S, dir: &Path)
where
    S: Sink<In = Sale> + streamwork::core::checkpoint::Transactional + Clone,
{
    let _ = std::fs::remove_dir_all(dir);
    job! {
        delivery exactly_once;
        source sales = GeneratorSource::new(sale).take(events);
        sink out = sink <- sales;
    }
    .unwrap()
    .run_with(RunOptions {
        checkpoints: Some(CheckpointConfig::new(
            dir.join("checkpoints"),
            Duration::from_secs(1),
        )),
        ..RunOptions::default()
    })
    .unwrap();
}

fn main() {
    let Ok(url) = std::env::var("STREAMWORK_POSTGRES_URL") else {
        println!(
            "skipped: no Postgres (set STREAMWORK_POSTGRES_URL, see scripts/postgres-test-server.sh)"
        );
        return;
    };
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (events, rounds) = (env("SINK_EVENTS", 1_000_000), env("SINK_ROUNDS", 3));
    let root = std::env::temp_dir().join(format!("streamwork-sink-bench-{}", std::process::id()));
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut names = vec![
        "file csv",
        "file csv gzip",
        "file csv zstd",
        "file parquet",
        "postgres append",
        "postgres upsert",
    ];
    #[cfg(feature = "s3")]
    let s3 = match (
        std::env::var("STREAMWORK_S3_ENDPOINT"),
        std::env::var("STREAMWORK_S3_BUCKET"),
    ) {
        (Ok(endpoint), Ok(bucket)) => {
            names.extend(["s3 csv gzip (moto)", "s3 parquet (moto)"]);
            Some((endpoint, bucket))
        }
        _ => {
            println!(
                "no object store (STREAMWORK_S3_ENDPOINT, scripts/s3-test-server.sh): its rows are left out"
            );
            None
        }
    };
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        for (which, name) in names.iter().enumerate() {
            let dir = root.join(format!("{which}"));
            let table = format!("bench_sales_{which}");
            let postgres = (4..6).contains(&which);
            if postgres {
                db.batch_execute(&format!(
                    "DROP TABLE IF EXISTS {table}; \
                     CREATE TABLE {table} (id bigint PRIMARY KEY, customer text, amount float8); \
                     DELETE FROM streamwork_sink_progress WHERE sink = '{table}'"
                ))
                .or_else(|_| {
                    db.batch_execute(&format!(
                        "DROP TABLE IF EXISTS {table}; \
                     CREATE TABLE {table} (id bigint PRIMARY KEY, customer text, amount float8)"
                    ))
                })
                .unwrap();
            }
            let file = |compression| {
                FileSink::<Sale>::csv(dir.join("out"))
                    .has_headers()
                    .compression(compression)
                    .transactional()
            };
            let started = Instant::now();
            match which {
                0 => run(events, file(Compression::None), &dir),
                1 => run(events, file(Compression::Gzip), &dir),
                2 => run(events, file(Compression::Zstd), &dir),
                3 => run(events, FileSink::<Sale>::parquet(dir.join("out")), &dir),
                4 => run(
                    events,
                    PostgresSink::<Sale>::append(&url, &table).id(&table),
                    &dir,
                ),
                5 => run(
                    events,
                    PostgresSink::<Sale>::upsert(&url, &table, &["id"]).id(&table),
                    &dir,
                ),
                #[cfg(feature = "s3")]
                _ => {
                    use streamwork::connectors::file::StorePrefix;
                    let Some((endpoint, bucket)) = &s3 else {
                        unreachable!("object-store rows only with a store")
                    };
                    let at = format!("sink-bench-{}/{round}-{which}", std::process::id());
                    let prefix = StorePrefix::s3(Some(endpoint), bucket, &at).unwrap();
                    if which == 6 {
                        let csv = FileSink::<Sale>::csv("")
                            .has_headers()
                            .compression(Compression::Gzip);
                        run(events, csv.into_store(prefix), &dir)
                    } else {
                        run(
                            events,
                            FileSink::<Sale>::parquet("").into_store(prefix),
                            &dir,
                        )
                    }
                }
                #[cfg(not(feature = "s3"))]
                _ => unreachable!("object-store rows only with feature s3"),
            }
            let elapsed = started.elapsed().as_secs_f64();
            if postgres {
                let rows: i64 = db
                    .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                    .unwrap()
                    .get(0);
                assert_eq!(rows as u64, events, "{name}: every record once");
            }
            seconds[which].push(elapsed);
            println!(
                "round {round}: {name}: {:.0} records/s",
                events as f64 / elapsed
            );
        }
    }
    let median = |s: &[f64]| {
        let mut s = s.to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    let file_rate = events as f64 / median(&seconds[0]);
    println!("\n{events} records, checkpoints every second, median of {rounds} rounds:");
    for (which, name) in names.iter().enumerate() {
        let rate = events as f64 / median(&seconds[which]);
        println!(
            "{name:>16}: {rate:>10.0} records/s  {:>5.1}% of the plain file",
            rate / file_rate * 100.0
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
