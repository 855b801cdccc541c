//! Parquet files, exactly once: a job writes them with checkpoints, fails
//! after one and resumes; pyarrow (an independent reader) finds every row
//! once with its type, and the Parquet source reads them back at other
//! parallelisms, also across a restore.
//!
//! ```text
//! eval "$(scripts/pyarrow-reader.sh)"
//! cargo test --features parquet --test parquet_files
//! ```

#![cfg(feature = "parquet")]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// pyarrow's reading of the files in `dir`: the schema's types, then one
/// line per row (`id|customer|amount|coupon|paid`), sorted.
fn read_by_pyarrow(dir: &Path) -> Option<(String, Vec<String>)> {
    let Ok(path) = std::env::var("STREAMWORK_PYARROW_PATH") else {
        let missing = "no pyarrow (eval \"$(scripts/pyarrow-reader.sh)\")";
        assert!(
            std::env::var_os("CI").is_none(),
            "{missing}: under CI every Parquet test runs"
        );
        println!("skipped the independent reader: {missing}");
        return None;
    };
    let script = r#"
import sys, pyarrow.dataset as ds
table = ds.dataset(sys.argv[1], format="parquet", exclude_invalid_files=False).to_table()
print(",".join(f"{f.name}:{f.type}" for f in table.schema))
rows = sorted("|".join(str(v) for v in row.values()) for row in table.to_pylist())
print("\n".join(rows))
"#;
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
    let text = String::from_utf8(out.stdout).unwrap();
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
                operator checked[p] = |s: Sale| fail_once_at_zero(s) <- sales;
                sink kept = got.clone().transactional() <- checked;
            }
            .unwrap()
            .run_with(exactly_once(&reread, 0))
        };
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
