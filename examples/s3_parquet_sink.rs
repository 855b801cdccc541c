//! Sales written as Parquet files to S3, exactly once, in Hive-style
//! folders by region (`sales/region=eu/part-...parquet`), with checkpoints
//! in the same bucket and nothing on local disk that a restart needs: kill
//! it at any moment and run it again, here or on another machine, and the
//! bucket holds each sale once. The files go up in parts as they are
//! written, and become visible when their checkpoint completes.
//!
//! ```text
//! eval "$(scripts/s3-test-server.sh start)"
//! cargo run --features s3,parquet --example s3_parquet_sink -- --sales 1000000
//! ```
//!
//! It reads the endpoint and bucket from `STREAMWORK_S3_ENDPOINT` and
//! `STREAMWORK_S3_BUCKET` (the local moto server's, by default), writes
//! under `--prefix`, and prints the objects it finds there at the end.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use streamwork::connectors::file::StorePrefix;
use streamwork::prelude::*;
use streamwork::state::ObjectStoreCheckpoints;

#[derive(Parser, Debug)]
struct Args {
    /// Sales to generate.
    #[arg(long, default_value_t = 1_000_000)]
    sales: u64,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Where in the bucket: `PREFIX/sales` and `PREFIX/checkpoints`.
    #[arg(long, default_value = "s3-parquet-sink")]
    prefix: String,
    /// This machine's working directory (empty on another machine).
    #[arg(long, default_value = "target/s3-parquet-sink")]
    work: String,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Sale {
    id: i64,
    customer: String,
    region: String,
    amount: f64,
    coupon: Option<String>,
}

fn sale(i: u64) -> Sale {
    Sale {
        id: i as i64,
        customer: format!("customer {}", i % 10_007),
        region: ["eu", "us", "asia"][(i % 3) as usize].to_string(),
        amount: (i % 1_000) as f64 * 0.25,
        coupon: i.is_multiple_of(7).then(|| format!("C{}", i % 97)),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let endpoint =
        std::env::var("STREAMWORK_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into());
    let bucket =
        std::env::var("STREAMWORK_S3_BUCKET").unwrap_or_else(|_| "streamwork-tests".into());
    let checkpoints = ObjectStoreCheckpoints::s3(
        Some(&endpoint),
        &bucket,
        &format!("{}/checkpoints", args.prefix),
    )?;
    let out = StorePrefix::s3(Some(&endpoint), &bucket, &format!("{}/sales", args.prefix))?;
    let p = args.parallelism;
    let graph = job! {
        name "s3 parquet sink";
        delivery exactly_once;
        source sales[p] = GeneratorSource::new(sale).take(args.sales);
        sink out[p] = FileSink::<Sale>::parquet("")
            .partition_by(|sale: &Sale, _| format!("region={}", sale.region))
            .into_store(out.clone()) <- sales;
    }?;
    let report = graph.run_with(RunOptions {
        checkpoints: Some(
            CheckpointConfig::new(&args.work, Duration::from_secs(1))
                .stored_in(Arc::new(checkpoints)),
        ),
        ..RunOptions::default()
    })?;
    let listed = out.list()?;
    let bytes: u64 = listed.iter().map(|(_, size)| size).sum();
    println!(
        "done (restored from {:?}): {} Parquet objects, {bytes} bytes, in s3://{bucket}/{}/sales",
        report.recovery.restored_from,
        listed.len(),
        args.prefix
    );
    Ok(())
}
