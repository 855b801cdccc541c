//! Events written as JSON lines to S3, exactly once, in objects that roll
//! by size and age across checkpoints (`.rolling(..)`), each uploaded in
//! parts as it is written and visible once the checkpoint covering it
//! completes; checkpoints in the same bucket, nothing on local disk that a
//! restart needs. Kill it at any moment and run it again, here or on
//! another machine, at any parallelism: each event is in the bucket once.
//!
//! ```text
//! eval "$(scripts/s3-test-server.sh start)"
//! cargo run --features s3 --example s3_json_lines -- --events 2000000
//! ```
//!
//! It writes under `s3://$STREAMWORK_S3_BUCKET/PREFIX/events` (the local
//! moto server's, by default; the endpoint from `AWS_ENDPOINT_URL`) and
//! prints what it finds there at the end.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::file::StorePrefix;
use streamwork::prelude::*;
use streamwork::state::ObjectStoreCheckpoints;

#[derive(Parser, Debug)]
struct Args {
    /// Events to generate.
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Where in the bucket: `PREFIX/events` and `PREFIX/checkpoints`.
    #[arg(long, default_value = "s3-json-lines")]
    prefix: String,
    /// This machine's working directory (empty on another machine).
    #[arg(long, default_value = "target/s3-json-lines")]
    work: String,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Event {
    id: u64,
    user: String,
    action: String,
    amount: f64,
}

fn event(i: u64) -> Event {
    Event {
        id: i,
        user: format!("user-{}", i % 100_003),
        action: ["view", "click", "buy"][(i % 3) as usize].to_string(),
        amount: (i % 10_000) as f64 / 100.0,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let bucket =
        std::env::var("STREAMWORK_S3_BUCKET").unwrap_or_else(|_| "streamwork-tests".into());
    let endpoint = std::env::var("AWS_ENDPOINT_URL").ok();
    let checkpoints = ObjectStoreCheckpoints::s3(
        endpoint.as_deref(),
        &bucket,
        &format!("{}/checkpoints", args.prefix),
    )?;
    let out = StorePrefix::url(&format!("s3://{bucket}/{}/events", args.prefix))?;
    let p = args.parallelism;
    let graph = job! {
        name "s3 json lines";
        delivery exactly_once;
        source events[p] = GeneratorSource::new(event).take(args.events);
        sink out[p] = FileSink::<Event>::json("")
            .rolling(16 << 20, Duration::from_secs(2))
            .into_store(out.clone()) <- events;
    }?;
    let report = graph.run_with(RunOptions {
        checkpoints: Some(
            CheckpointConfig::new(&args.work, Duration::from_millis(500))
                .stored_in(Arc::new(checkpoints)),
        ),
        ..RunOptions::default()
    })?;
    let listed = out.list()?;
    let bytes: u64 = listed.iter().map(|(_, size)| size).sum();
    println!(
        "done (restored from {:?}): {} objects, {bytes} bytes, {} uploads in progress, in s3://{bucket}/{}/events",
        report.recovery.restored_from,
        listed.len(),
        out.uploads_in_progress()?.len(),
        args.prefix
    );
    Ok(())
}
