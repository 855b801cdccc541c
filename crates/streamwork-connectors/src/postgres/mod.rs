//! A PostgreSQL sink, exactly once by two-phase commit (feature `postgres`).
//!
//! What the records of one checkpoint write goes into one database
//! transaction, filled in batches as records come. At the barrier the sink
//! prepares it
//! (`PREPARE TRANSACTION`, durable in the database, no longer tied to the
//! connection); when the checkpoint is complete it commits it (`COMMIT
//! PREPARED`). The transaction's id names the sink, the instance and the
//! checkpoint (`streamwork:ID:INSTANCE:CHECKPOINT`), so whoever restores the
//! job, on any machine, finds the prepared transactions a failure left
//! behind in `pg_prepared_xacts` and commits those the restored checkpoint
//! covers and rolls back the others: nothing but the database is shared,
//! and what a replay emits, whatever the operators do, belongs to a later
//! checkpoint. A prepared transaction holds its rows' locks until it is
//! committed, so the next checkpoint's rows (an upsert of the same key)
//! are held back in memory until the sink sees the checkpoint complete and
//! commits it: the sink never waits on its own locks. It holds 64 batches
//! at most, then waits for the checkpoint (and its input with it), so its
//! memory stays bounded whatever the input rate. Each transaction
//! also records its checkpoint in
//! `streamwork_sink_progress`, so that a run restored from before output
//! the sink has committed is refused rather than writing it twice.
//!
//! Rows are records serialized by serde as JSON objects, turned into the
//! table's row type by the server (`json_populate_recordset`), a batch
//! per statement: a field is a column of the same name, and the server
//! converts and checks each value for its column's type. A NaN or infinite
//! float goes as the value it is (`rows.rs`), never as a silent `NULL`.

mod rows;

use std::collections::HashMap;

use postgres::{Client, NoTls};
use serde::Serialize;
use streamwork_core::checkpoint::{CheckpointId, CheckpointView, Restore, Transactional};
use streamwork_core::{ConnectorError, Data, InstanceContext, InstanceIdx, Record, Sink};

/// Rows per statement by default.
const DEFAULT_BATCH_ROWS: usize = 1_000;

/// How long the sink waits, by default, for a checkpoint it prepared to
/// complete before it writes more.
const DEFAULT_CHECKPOINT_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Batches of rows an instance holds at most while the checkpoint before
/// them completes (upserts of one key count once).
const HELD_BATCHES: usize = 64;

/// The table of each sink instance's last committed checkpoint.
const PROGRESS_TABLE: &str = "streamwork_sink_progress";

/// Writes records as rows of a PostgreSQL table, appended or upserted by
/// key, exactly once (see the module docs): fit for a job declared
/// `delivery exactly_once`.
///
/// The server needs prepared transactions on (`max_prepared_transactions`
/// at least the sink's parallelism × 2); a server without them is refused
/// at start, naming the setting. The table must exist, and, to upsert, have
/// a unique constraint on the key columns.
///
/// ```no_run
/// use streamwork::connectors::postgres::PostgresSink;
/// #[derive(Clone, serde::Serialize)]
/// struct Count { word: String, count: i64 }
/// // CREATE TABLE word_counts (word text PRIMARY KEY, count bigint);
/// let sink = PostgresSink::<Count>::upsert(
///     "postgresql://app@127.0.0.1/analytics",
///     "word_counts",
///     &["word"],
/// );
/// # let _ = sink;
/// ```
pub struct PostgresSink<T> {
    url: String,
    table: String,
    /// Key columns: upsert by them; none: append.
    key: Vec<String>,
    /// Names the sink's transactions; the component name by default.
    id: Option<String>,
    batch_rows: usize,
    checkpoint_wait: std::time::Duration,
    open: Option<Open>,
    _records: std::marker::PhantomData<fn(T)>,
}

/// A sink instance at work.
struct Open {
    /// Writes the checkpoint's transaction.
    client: Client,
    /// Commits and rolls back prepared transactions, outside the one being
    /// written (which the next checkpoint's records may have begun).
    control: Client,
    /// The sink's id, as its transactions are named.
    id: String,
    instance: u32,
    component: String,
    /// The table, quoted.
    table: String,
    /// The table's columns.
    columns: Vec<String>,
    /// The statement for a batch, once the first record named its columns.
    statement: Option<String>,
    /// The batch: rows as JSON objects, and for an upsert the index of
    /// each key's row (a statement may not touch a row twice).
    rows: Vec<String>,
    keys: HashMap<String, usize>,
    /// Whether a transaction is open.
    in_transaction: bool,
    /// Prepared and not yet committed, by checkpoint.
    prepared: Vec<CheckpointId>,
    /// Which checkpoints are complete, if the job takes them.
    view: Option<CheckpointView>,
    /// How long to wait for a prepared checkpoint to complete.
    checkpoint_wait: std::time::Duration,
}

impl<T> Clone for PostgresSink<T> {
    fn clone(&self) -> Self {
        PostgresSink {
            url: self.url.clone(),
            table: self.table.clone(),
            key: self.key.clone(),
            id: self.id.clone(),
            batch_rows: self.batch_rows,
            checkpoint_wait: self.checkpoint_wait,
            open: None,
            _records: std::marker::PhantomData,
        }
    }
}

impl<T: Data + Serialize> PostgresSink<T> {
    /// Appends every record as a row of `table`.
    pub fn append(url: impl Into<String>, table: impl Into<String>) -> Self {
        PostgresSink::upsert(url, table, &[])
    }

    /// Upserts every record as a row of `table` by the `key` columns: a
    /// record whose key is in the table replaces its other columns.
    pub fn upsert(url: impl Into<String>, table: impl Into<String>, key: &[&str]) -> Self {
        PostgresSink {
            url: url.into(),
            table: table.into(),
            key: key.iter().map(|k| k.to_string()).collect(),
            id: None,
            batch_rows: DEFAULT_BATCH_ROWS,
            checkpoint_wait: DEFAULT_CHECKPOINT_WAIT,
            open: None,
            _records: std::marker::PhantomData,
        }
    }

    /// Names the sink's transactions (by default the component's name): two
    /// jobs writing to one database need different ids.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Rows per statement (1,000 by default; at least 1).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// How long the sink waits for a checkpoint it prepared to complete
    /// when it needs that to go on: at the next barrier, or when the rows
    /// held for after it reach 64 batches (10 minutes by default). Past it
    /// the job fails, naming the checkpoints, and a restart commits or
    /// rolls back what each covers.
    pub fn checkpoint_wait(mut self, wait: std::time::Duration) -> Self {
        self.checkpoint_wait = wait;
        self
    }

    fn open_mut(&mut self) -> Result<&mut Open, ConnectorError> {
        let table = &self.table;
        self.open.as_mut().ok_or_else(|| not_open(table))
    }
}

/// The refusal of a sink used before it was opened.
fn not_open(table: &str) -> ConnectorError {
    ConnectorError::user(format!(
        "Postgres sink for table `{table}` used before it was opened"
    ))
}

/// An error of the database, with what the sink was doing.
fn db(doing: impl std::fmt::Display, e: postgres::Error) -> ConnectorError {
    let detail = match e.as_db_error() {
        Some(db) => {
            let mut text = db.message().to_string();
            if let Some(detail) = db.detail() {
                text += &format!(" ({detail})");
            }
            if let Some(column) = db.column() {
                text += &format!(" [column {column}]");
            }
            text
        }
        None => e.to_string(),
    };
    let message = format!("Postgres: {doing}: {detail}");
    if e.as_db_error().is_some() {
        ConnectorError::user(message)
    } else {
        ConnectorError::io(message, std::io::Error::other(e))
    }
}

/// `name` as a quoted identifier (`schema.table` as two).
fn quoted(name: &str) -> String {
    name.split('.')
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// A checkpoint as the progress table keeps it (`bigint`; the final
/// checkpoint is the largest).
fn progress_value(checkpoint: CheckpointId) -> i64 {
    i64::try_from(checkpoint.get()).unwrap_or(i64::MAX)
}

fn checkpoint_of_progress(value: i64) -> CheckpointId {
    match value {
        i64::MAX => CheckpointId::FINAL,
        value => CheckpointId::new(value.max(0) as u64),
    }
}

/// A transaction's id.
fn gid(id: &str, instance: u32, checkpoint: CheckpointId) -> String {
    format!("streamwork:{id}:{instance}:{:020}", checkpoint.get())
}

/// The instance and checkpoint of a transaction id of sink `id`.
fn parse_gid(id: &str, gid: &str) -> Option<(u32, CheckpointId)> {
    let rest = gid.strip_prefix("streamwork:")?.strip_prefix(id)?;
    let (instance, checkpoint) = rest.strip_prefix(':')?.split_once(':')?;
    Some((
        instance.parse().ok()?,
        CheckpointId::new(checkpoint.parse().ok()?),
    ))
}

impl Open {
    /// Starts the checkpoint's transaction, if not yet.
    fn begin(&mut self) -> Result<(), ConnectorError> {
        if !self.in_transaction {
            self.client
                .batch_execute("BEGIN")
                .map_err(|e| db("beginning a transaction", e))?;
            self.in_transaction = true;
        }
        Ok(())
    }

    /// Writes the batch into the open transaction.
    fn write_batch(&mut self) -> Result<(), ConnectorError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.begin()?;
        let statement = self.statement.as_deref().unwrap_or_default();
        let mut json =
            String::with_capacity(self.rows.iter().map(|r| r.len() + 1).sum::<usize>() + 2);
        json.push('[');
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(row);
        }
        json.push(']');
        let rows = self.rows.len();
        self.client.execute(statement, &[&json]).map_err(|e| {
            db(
                format!(
                    "table {} refused a batch of {rows} rows (statement: {statement})",
                    self.table
                ),
                e,
            )
        })?;
        self.rows.clear();
        self.keys.clear();
        Ok(())
    }

    /// Commits the prepared transactions of complete checkpoints; whether
    /// none is left uncommitted (so that writing cannot wait on their locks).
    fn settle(&mut self) -> Result<bool, ConnectorError> {
        if let (Some(view), Some(&oldest)) = (&self.view, self.prepared.first()) {
            let completed = view.completed();
            if completed >= oldest {
                self.commit_up_to(completed)?;
            }
        }
        Ok(self.prepared.is_empty())
    }

    /// Writes the batch once no prepared transaction of this instance is
    /// left uncommitted; until then it keeps growing, up to `held` rows,
    /// where the sink waits for the checkpoint to complete (its input
    /// waits, and backpressure slows the sources).
    fn write_batch_when_settled(&mut self, held: usize) -> Result<(), ConnectorError> {
        if self.rows.len() >= held {
            self.wait_settled("the rows held for after it reached their bound")?;
        }
        if self.settle()? {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Waits until the checkpoints this instance prepared are complete and
    /// committed, for up to the sink's `checkpoint_wait`.
    fn wait_settled(&mut self, why: &str) -> Result<(), ConnectorError> {
        let started = std::time::Instant::now();
        while !self.settle()? {
            if self.view.as_ref().is_some_and(CheckpointView::job_failed) {
                return Err(ConnectorError::user(format!(
                    "Postgres sink `{}`: the job failed while checkpoint(s) {:?}, which this sink prepared, were completing: a restart commits or rolls back what each covers",
                    self.component, self.prepared
                )));
            }
            // Without checkpoints nothing says when they complete.
            if self.view.is_none() || started.elapsed() >= self.checkpoint_wait {
                return Err(ConnectorError::user(format!(
                    "Postgres sink `{}`: checkpoint(s) {:?}, which this sink prepared, did not complete within {:?}, and {why}: restart the job, which commits or rolls back what each covers",
                    self.component, self.prepared, self.checkpoint_wait
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    }

    /// Prepares what was written since the last barrier as `checkpoint`'s.
    fn prepare(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        // The engine takes one checkpoint at a time, but an instance whose
        // input ended takes its final one as soon as it ends: the checkpoint
        // before may still be completing. It will without this instance (its
        // part is in), and then its rows' locks go with its commit.
        if !self.rows.is_empty() {
            self.wait_settled(&format!(
                "checkpoint {checkpoint}'s rows would wait on their locks"
            ))?;
        }
        self.write_batch()?;
        if !self.in_transaction {
            return Ok(());
        }
        let gid = gid(&self.id, self.instance, checkpoint);
        let progress = format!(
            "INSERT INTO {PROGRESS_TABLE} (sink, instance, checkpoint) VALUES ($1, $2, $3) \
             ON CONFLICT (sink, instance) DO UPDATE SET checkpoint = EXCLUDED.checkpoint"
        );
        self.client
            .execute(
                &progress,
                &[
                    &self.id,
                    &(self.instance as i32),
                    &progress_value(checkpoint),
                ],
            )
            .map_err(|e| db("recording the sink's progress", e))?;
        self.client
            .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
            .map_err(|e| db(format!("preparing transaction {gid}"), e))?;
        self.in_transaction = false;
        self.prepared.push(checkpoint);
        Ok(())
    }

    /// Commits what was prepared for checkpoints up to `checkpoint`.
    fn commit_up_to(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let (due, later): (Vec<_>, Vec<_>) = self.prepared.iter().partition(|&&c| c <= checkpoint);
        for c in due {
            let gid = gid(&self.id, self.instance, c);
            self.control
                .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
                .map_err(|e| db(format!("committing transaction {gid}"), e))?;
        }
        self.prepared = later;
        Ok(())
    }
}

impl<T: Data + Serialize> Transactional for PostgresSink<T> {}

impl<T: Data + Serialize> Sink for PostgresSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let id = self
            .id
            .clone()
            .unwrap_or_else(|| ctx.component().to_string());
        if id.contains('\'') || id.contains(':') {
            return Err(ConnectorError::user(format!(
                "Postgres sink `{}`: its id `{id}` names its transactions and may not hold `'` or `:`: give it another with `.id(...)`",
                ctx.component()
            )));
        }
        let mut client = Client::connect(&self.url, NoTls)
            .map_err(|e| db(format!("connecting to {}", self.url), e))?;
        let control = Client::connect(&self.url, NoTls)
            .map_err(|e| db(format!("connecting to {}", self.url), e))?;
        let prepared: String = client
            .query_one("SHOW max_prepared_transactions", &[])
            .map_err(|e| db("reading max_prepared_transactions", e))?
            .get(0);
        if prepared.trim() == "0" {
            return Err(ConnectorError::user(format!(
                "Postgres at {} has max_prepared_transactions = 0, and the exactly-once sink `{}` prepares a transaction per checkpoint: set `max_prepared_transactions` to at least twice the sink's parallelism in postgresql.conf and restart the server",
                self.url,
                ctx.component()
            )));
        }
        let (schema, name) = match self.table.split_once('.') {
            Some((schema, name)) => (Some(schema.to_string()), name.to_string()),
            None => (None, self.table.clone()),
        };
        let columns: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = coalesce($1, current_schema()) AND table_name = $2 \
                 ORDER BY ordinal_position",
                &[&schema, &name],
            )
            .map_err(|e| db(format!("reading the columns of table {}", self.table), e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if columns.is_empty() {
            return Err(ConnectorError::user(format!(
                "Postgres sink `{}`: table `{}` does not exist at {}: create it first",
                ctx.component(),
                self.table,
                self.url
            )));
        }
        if let Some(missing) = self.key.iter().find(|k| !columns.contains(k)) {
            return Err(ConnectorError::user(format!(
                "Postgres sink `{}`: key column `{missing}` is not a column of table `{}` (its columns: {})",
                ctx.component(),
                self.table,
                columns.join(", ")
            )));
        }
        // Instances open at once: one creates the progress table.
        client
            .batch_execute(&format!(
                "BEGIN; SELECT pg_advisory_xact_lock(7360155416); \
                 CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} \
                 (sink text, instance integer, checkpoint bigint, PRIMARY KEY (sink, instance)); \
                 COMMIT"
            ))
            .map_err(|e| db(format!("creating table {PROGRESS_TABLE}"), e))?;
        self.open = Some(Open {
            client,
            control,
            id,
            instance: ctx.instance().0,
            component: ctx.component().to_string(),
            table: quoted(&self.table),
            columns,
            statement: None,
            rows: Vec::new(),
            keys: HashMap::new(),
            in_transaction: false,
            prepared: Vec::new(),
            view: ctx.checkpoints().cloned(),
            checkpoint_wait: self.checkpoint_wait,
        });
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let PostgresSink {
            key,
            batch_rows,
            table: table_name,
            open,
            ..
        } = self;
        let open = open.as_mut().ok_or_else(|| not_open(table_name))?;
        let value = rows::to_row(&record.value).map_err(|e| {
            ConnectorError::user(format!(
                "Postgres sink `{}`: a record cannot be written as a row of `{table_name}`: {e}",
                open.component
            ))
        })?;
        let serde_json::Value::Object(fields) = &value else {
            return Err(ConnectorError::user(format!(
                "Postgres sink `{}`: a record is written as a row by its named fields, and this one is {value}: write a struct",
                open.component
            )));
        };
        if open.statement.is_none() {
            open.statement = Some(statement(open, fields, key, table_name)?);
        }
        let row = value.to_string();
        if key.is_empty() {
            open.rows.push(row);
        } else {
            let key_value: Vec<&serde_json::Value> = key
                .iter()
                .map(|k| fields.get(k).unwrap_or(&serde_json::Value::Null))
                .collect();
            let key_text = serde_json::to_string(&key_value).unwrap_or_default();
            match open.keys.get(&key_text) {
                Some(&at) => open.rows[at] = row,
                None => {
                    open.keys.insert(key_text, open.rows.len());
                    open.rows.push(row);
                }
            }
        }
        if open.rows.len() >= *batch_rows {
            open.write_batch_when_settled(batch_rows.saturating_mul(HELD_BATCHES))?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.open_mut()?.prepare(checkpoint)
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        self.open_mut()?.commit_up_to(checkpoint)
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if self.open.is_some() {
            crate::commit::commit_at_end(self)?;
        }
        Ok(())
    }

    /// Commits the prepared transactions of this instance's share of the
    /// old instances that the restored checkpoint covers, rolls back the
    /// others, and refuses a run that starts before committed output.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let open = self.open_mut()?;
        let parallelism = restore.parallelism.max(1);
        let pattern = format!(
            "streamwork:{}:%",
            open.id.replace('%', "\\%").replace('_', "\\_")
        );
        let gids: Vec<String> = open
            .control
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1 AND database = current_database() ORDER BY gid",
                &[&pattern],
            )
            .map_err(|e| db("listing prepared transactions", e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for gid in gids {
            let Some((instance, checkpoint)) = parse_gid(&open.id, &gid) else {
                continue;
            };
            if instance % parallelism != restore.instance.0 {
                continue;
            }
            // An old instance that had ended is covered to its end.
            let verb = if checkpoint <= restore.covers(InstanceIdx(instance)) {
                "COMMIT PREPARED"
            } else {
                "ROLLBACK PREPARED"
            };
            match open.control.batch_execute(&format!("{verb} '{gid}'")) {
                Ok(()) => {}
                // Another instance of this run finished it first (an
                // instance restored twice, say).
                Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => {}
                Err(e) => return Err(db(format!("{verb} '{gid}'"), e)),
            }
        }
        // Only the instances this one answers for: its own and the removed
        // ones it inherits. The others' are theirs to check, and this run's
        // other instances may already have committed past the restore.
        let progress: Vec<(i32, i64)> = open
            .control
            .query(
                &format!("SELECT instance, checkpoint FROM {PROGRESS_TABLE} WHERE sink = $1"),
                &[&open.id],
            )
            .map_err(|e| db("reading the sink's progress", e))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let past = progress.into_iter().find_map(|(instance, committed)| {
            let instance = u32::try_from(instance).ok()?;
            let committed = checkpoint_of_progress(committed);
            (instance % parallelism == restore.instance.0
                && committed > restore.covers(InstanceIdx(instance)))
            .then_some(committed)
        });
        if let Some(committed) = past {
            let from = if restore.is_fresh() {
                "no checkpoint".to_string()
            } else {
                format!("checkpoint {}", restore.checkpoint)
            };
            return Err(ConnectorError::user(format!(
                "Postgres sink `{}` has committed the output of checkpoint {committed} into table {}, but this run starts from {from}: that output would be written twice. Point the job at the checkpoints it was written with, or, to start over, empty the table and run `DELETE FROM {PROGRESS_TABLE} WHERE sink = '{}'`",
                open.component, open.table, open.id
            )));
        }
        Ok(())
    }
}

/// The statement writing a batch of rows shaped like `fields` into the
/// table: appended, or upserted by `key`.
fn statement(
    open: &Open,
    fields: &serde_json::Map<String, serde_json::Value>,
    key: &[String],
    table_name: &str,
) -> Result<String, ConnectorError> {
    if let Some(unknown) = fields.keys().find(|f| !open.columns.contains(f)) {
        return Err(ConnectorError::user(format!(
            "Postgres sink `{}`: the record's field `{unknown}` is not a column of table `{table_name}` (its columns: {})",
            open.component,
            open.columns.join(", ")
        )));
    }
    if let Some(missing) = key.iter().find(|k| !fields.contains_key(*k)) {
        return Err(ConnectorError::user(format!(
            "Postgres sink `{}`: the record has no field for key column `{missing}`",
            open.component
        )));
    }
    let columns: Vec<String> = fields.keys().map(|f| quoted_column(f)).collect();
    let list = columns.join(", ");
    let mut sql = format!(
        "INSERT INTO {table} ({list}) SELECT {list} FROM json_populate_recordset(NULL::{table}, $1::text::json)",
        table = open.table
    );
    if !key.is_empty() {
        let keys: Vec<String> = key.iter().map(|k| quoted_column(k)).collect();
        let updates: Vec<String> = fields
            .keys()
            .filter(|f| !key.contains(f))
            .map(|f| format!("{c} = EXCLUDED.{c}", c = quoted_column(f)))
            .collect();
        sql += &format!(" ON CONFLICT ({})", keys.join(", "));
        if updates.is_empty() {
            sql += " DO NOTHING";
        } else {
            sql += &format!(" DO UPDATE SET {}", updates.join(", "));
        }
    }
    Ok(sql)
}

fn quoted_column(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_round_trip_and_name_only_their_sink() {
        let id = gid("orders", 3, CheckpointId::new(17));
        assert_eq!(id, "streamwork:orders:3:00000000000000000017");
        assert_eq!(parse_gid("orders", &id), Some((3, CheckpointId::new(17))));
        assert_eq!(parse_gid("order", &id), None);
        assert_eq!(parse_gid("orders:3", &id), None);
        for checkpoint in [CheckpointId::new(3), CheckpointId::FINAL] {
            assert_eq!(
                checkpoint_of_progress(progress_value(checkpoint)),
                checkpoint
            );
        }
        assert!(progress_value(CheckpointId::FINAL) > progress_value(CheckpointId::new(3)));
        let last = gid("orders", 0, CheckpointId::FINAL);
        assert_eq!(parse_gid("orders", &last), Some((0, CheckpointId::FINAL)));
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quoted("orders"), "\"orders\"");
        assert_eq!(quoted("sales.orders"), "\"sales\".\"orders\"");
        assert_eq!(quoted_column("a\"b"), "\"a\"\"b\"");
    }
}
