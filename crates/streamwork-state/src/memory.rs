//! How much memory the process may use: its cgroup's limit (v2, then v1),
//! or else the machine's memory; the default budgets of state derive from
//! it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes of the process's stored states' tables not yet durable, as
/// each last counted them.
static UNSETTLED: AtomicUsize = AtomicUsize::new(0);

/// Replaces `before` with `now` in the process's total; the new total.
pub(crate) fn recount(before: usize, now: usize) -> usize {
    if now >= before {
        UNSETTLED.fetch_add(now - before, Ordering::AcqRel) + (now - before)
    } else {
        UNSETTLED.fetch_sub(before - now, Ordering::AcqRel) - (before - now)
    }
}

/// The bytes of the process's stored states' tables not yet durable, as
/// each last counted them.
pub fn unsettled_bytes() -> usize {
    UNSETTLED.load(Ordering::Acquire)
}

/// Assumed when neither a cgroup limit nor the machine's memory can be
/// read (not Linux).
const UNKNOWN: u64 = 8 << 30;

/// A quarter of [`available`]: the default budget of what a
/// [`StoredState`](crate::StoredState) holds that is not yet durable.
pub(crate) fn default_budget() -> usize {
    usize::try_from(available() / 4).unwrap_or(usize::MAX)
}

/// The memory the process may use, read once.
pub(crate) fn available() -> u64 {
    static AVAILABLE: OnceLock<u64> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let own = read("/proc/self/cgroup").unwrap_or_default();
        let cgroup = limit_files(&own)
            .iter()
            .find_map(|path| read(path).and_then(|text| limit(&text)));
        let machine = read("/proc/meminfo").and_then(|text| mem_total(&text));
        match (cgroup, machine) {
            (Some(cgroup), Some(machine)) => cgroup.min(machine),
            (one, other) => one.or(other).unwrap_or(UNKNOWN),
        }
    })
}

/// Where the process's memory limit may be, from `/proc/self/cgroup`:
/// its own cgroup's file (v2's `memory.max`, v1's
/// `memory.limit_in_bytes`), then the root's (a cgroup namespace shows
/// the process's cgroup as the root).
fn limit_files(own: &str) -> Vec<String> {
    let mut files = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            files.push(format!("/sys/fs/cgroup{path}/memory.max"));
        } else if controllers.split(',').any(|c| c == "memory") {
            files.push(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
        }
    }
    files.push("/sys/fs/cgroup/memory.max".to_string());
    files.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_string());
    files
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A cgroup limit in bytes (`max`, or v1's huge "no limit", is none).
fn limit(text: &str) -> Option<u64> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&bytes| bytes > 0 && bytes < 1 << 60)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_machine_memory_read_as_bytes() {
        assert_eq!(limit("1073741824\n"), Some(1 << 30));
        assert_eq!(limit("max\n"), None);
        assert_eq!(limit("9223372036854771712"), None, "cgroup v1's no limit");
        assert_eq!(limit(""), None);
        let meminfo = "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total("nothing"), None);
        let v1 = "4:memory:/jobs/a\n1:cpu:/\n0::/\n";
        assert_eq!(
            limit_files(v1)[..2],
            [
                "/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes".to_string(),
                "/sys/fs/cgroup/memory.max".to_string()
            ]
        );
        assert_eq!(
            limit_files("0::/user.slice/job\n")[0],
            "/sys/fs/cgroup/user.slice/job/memory.max"
        );
        assert!(available() > 0);
        assert!(default_budget() > 0);
    }
}
