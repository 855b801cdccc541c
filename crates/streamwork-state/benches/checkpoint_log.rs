//! Snapshot write and restore speed of the checkpoint log for one large
//! state, beside the plain file system doing the same bytes: `std::fs::write`
//! plus `sync_data` for writing, `std::fs::read` (a copy) for reading.
//!
//! ```sh
//! cargo bench -p streamwork-state --bench checkpoint_log            # 1 GiB
//! STATE_BENCH_MIB=256 cargo bench -p streamwork-state --bench checkpoint_log
//! ```

use std::io::Write;
use std::time::Instant;

use streamwork_core::{InstanceIdx, OperatorId};
use streamwork_state::{CheckpointLog, LogOptions, archive, load_latest};

fn gbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let mib: usize = std::env::var("STATE_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = std::env::temp_dir().join(format!("swlog-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The state: a keyed table of (key, count) pairs.
    let pairs = mib * (1 << 20) / 16;
    let state: Vec<(u64, u64)> = (0..pairs as u64).map(|k| (k, k.wrapping_mul(31))).collect();

    let started = Instant::now();
    let bytes = archive(&state)?;
    let archive_s = started.elapsed().as_secs_f64();

    let mut log = CheckpointLog::open(
        &dir,
        LogOptions {
            segment_bytes: 64 << 20,
            retain: 1,
        },
    )?;
    let started = Instant::now();
    let id = log.next_checkpoint_id().unwrap();
    log.append_snapshot(id, OperatorId(1), InstanceIdx(0), 1, &bytes)?;
    log.commit(id, 1)?;
    let write_s = started.elapsed().as_secs_f64();

    let plain = dir.join("plain.bin");
    let started = Instant::now();
    {
        let mut file = std::fs::File::create(&plain)?;
        file.write_all(&bytes)?;
        file.sync_data()?;
    }
    let plain_write_s = started.elapsed().as_secs_f64();

    // Restore: map, verify frames and checksums, validate the archive, and
    // read it in place (a sum over every pair, so every page is touched).
    let started = Instant::now();
    let checkpoint = load_latest(&dir)?;
    let snapshot = checkpoint
        .snapshot(OperatorId(1), InstanceIdx(0))
        .ok_or("the snapshot is missing")?;
    let archived = snapshot.access::<Vec<(u64, u64)>>()?;
    let sum = archived
        .iter()
        .fold(0u64, |s, p| s.wrapping_add(p.1.to_native()));
    let restore_s = started.elapsed().as_secs_f64();
    let expected = state.iter().fold(0u64, |s, p| s.wrapping_add(p.1));
    assert_eq!(sum, expected, "the restored state is the state");

    let started = Instant::now();
    let copy = std::fs::read(&plain)?;
    let plain_read_s = started.elapsed().as_secs_f64();
    assert_eq!(copy.len(), bytes.len());

    let n = bytes.len();
    println!(
        "state: {} pairs, archive {:.0} MiB",
        pairs,
        n as f64 / (1 << 20) as f64
    );
    println!(
        "archive (rkyv serialize):     {:.2} GB/s",
        gbps(n, archive_s)
    );
    println!(
        "checkpoint write + commit:    {:.2} GB/s  (plain write + sync_data {:.2} GB/s)",
        gbps(n, write_s),
        gbps(n, plain_write_s)
    );
    println!(
        "restore (map, verify, read):  {:.2} GB/s  (plain read into memory {:.2} GB/s)",
        gbps(n, restore_s),
        gbps(n, plain_read_s)
    );
    drop(checkpoint);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
