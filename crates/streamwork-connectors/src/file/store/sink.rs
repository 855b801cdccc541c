//! The object-store file sink: line or Parquet files under a prefix,
//! uploaded in parts as they are written and visible exactly once.
//!
//! Each instance writes an object at a time per folder, named
//! `[FOLDER/]part-INSTANCE-EPOCH-SEQ[.gz|.zst|.parquet]`, where `EPOCH` is
//! the checkpoint after which the object was begun. Its bytes go up as
//! parts of a multipart upload as soon as a part's worth is written, so a
//! sink holds about a part per object whatever the checkpoint interval.
//! At a barrier the checkpoint keeps, per object, the parts in and the
//! bytes not yet sent (less than a part); an object closed (by size, age,
//! or at every barrier for Parquet and a sink without rolling) is
//! completed, and becomes visible, once the checkpoint covering it is.
//! Whoever restores a checkpoint, on any machine, completes what it knows
//! (an open object with its checkpointed bytes as the last part), aborts
//! the uploads the failed run began after it (found by their markers, see
//! [`upload`](super::upload)), and refuses to start if an object of its
//! instances was completed after the checkpoint: that output would be
//! written twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use object_store::PutPayload;
use streamwork_core::checkpoint::{CheckpointId, Transactional};
use streamwork_core::{
    ConnectorError, Data, FormatError, InstanceContext, InstanceIdx, Record, Restore, Sink,
    StateBytes,
};

use super::StorePrefix;
use super::upload::{Checkpointed, Client, Closed, Open, Upload};
use crate::file::compression::{Compression, Encoder};
use crate::file::sink::LineFormat;
use crate::file::staging::Roll;

/// Writes records as files into an object store, exactly once, in parts
/// as they are written (see the module docs); made by
/// [`FileSink::into_store`](crate::FileSink::into_store) or
/// `ParquetSink::into_store`. Fit for a job declared `delivery
/// exactly_once`, on any number of machines that share nothing but the
/// checkpoint store.
///
/// Set the bucket's lifecycle rule that aborts incomplete multipart
/// uploads to days, not hours: an upload is completed when its checkpoint
/// is, and a job stopped longer than the rule allows loses what its last
/// checkpoint had not yet made visible (the restore then fails, naming
/// the object).
pub struct StoreFileSink<T> {
    prefix: StorePrefix,
    format: ObjectFormat<T>,
    open: Option<OpenStore<T>>,
}

/// How records become an object's bytes.
enum ObjectFormat<T> {
    Lines {
        format: LineFormat<T>,
        compression: Compression,
        roll: Option<Roll>,
    },
    #[cfg(feature = "parquet")]
    Parquet(crate::file::parquet::ParquetBytes<T>),
}

impl<T> Clone for ObjectFormat<T> {
    fn clone(&self) -> Self {
        match self {
            ObjectFormat::Lines {
                format,
                compression,
                roll,
            } => ObjectFormat::Lines {
                format: format.clone(),
                compression: *compression,
                roll: *roll,
            },
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => ObjectFormat::Parquet(format.clone()),
        }
    }
}

impl<T> Clone for StoreFileSink<T> {
    fn clone(&self) -> Self {
        StoreFileSink {
            prefix: self.prefix.clone(),
            format: self.format.clone(),
            open: None,
        }
    }
}

/// An object's bytes being encoded.
enum ObjectWriter<T> {
    /// A member (gzip) or frame (zstd) of lines; ended at each barrier, so
    /// that what a checkpoint holds of the object is a whole stream.
    Lines(Encoder<Vec<u8>>),
    #[cfg(feature = "parquet")]
    Parquet(crate::file::parquet::ParquetWriter<T>),
    #[cfg(not(feature = "parquet"))]
    #[allow(dead_code)]
    Never(std::marker::PhantomData<T>),
}

/// An object being written: its upload, and what is not yet sent.
struct Object<T> {
    upload: Upload,
    writer: Option<ObjectWriter<T>>,
    /// Encoded, not yet sent.
    buffer: Vec<u8>,
    begun: Instant,
}

struct OpenStore<T> {
    client: Client,
    instance: u32,
    component: String,
    /// What the objects' names end with.
    extension: &'static str,
    /// The checkpoint after which objects begun now are (0: none).
    epoch: u64,
    /// Objects begun since `epoch`.
    seq: u32,
    /// The objects being written, by folder ("" without partitions).
    objects: BTreeMap<String, Object<T>>,
    /// Objects with every part in, waiting for their checkpoint.
    closed: Vec<Closed>,
    line: Vec<u8>,
    /// The header line, once a record gave it.
    header: Option<Vec<u8>>,
    /// The sink's part of the checkpoint of the last barrier.
    checkpointed: Vec<u8>,
}

/// Bytes an encoder holds before they move to the object's buffer.
const DRAIN_BYTES: usize = 256 << 10;

/// The layout of the sink's part of a checkpoint: 2, parts and tails
/// ([`Checkpointed`]); 1, whole objects by checkpoint (read on restore).
const SCHEMA: u32 = 2;
const SCHEMA_WHOLE_OBJECTS: u32 = 1;

impl<T: Data> StoreFileSink<T> {
    pub(in crate::file) fn new(
        prefix: StorePrefix,
        format: LineFormat<T>,
        compression: Compression,
        roll: Option<Roll>,
    ) -> Self {
        StoreFileSink {
            prefix,
            format: ObjectFormat::Lines {
                format,
                compression,
                roll,
            },
            open: None,
        }
    }

    #[cfg(feature = "parquet")]
    pub(in crate::file) fn parquet(
        prefix: StorePrefix,
        format: crate::file::parquet::ParquetBytes<T>,
    ) -> Self {
        StoreFileSink {
            prefix,
            format: ObjectFormat::Parquet(format),
            open: None,
        }
    }
}

/// The refusal of a sink used before it was opened.
fn not_open() -> ConnectorError {
    ConnectorError::user("object-store file sink used before it was opened".to_string())
}

/// The instance and epoch in an object's file name: `part-I-EPOCH-SEQ.x`,
/// or `part-I-CHECKPOINT.x` as version 1 named a checkpoint's object
/// (begun after the checkpoint before it).
fn instance_and_epoch(file_name: &str) -> Option<(u32, u64)> {
    let stem = file_name.split('.').next()?;
    let mut fields = stem.strip_prefix("part-")?.split('-');
    let instance = fields.next()?.parse().ok()?;
    let checkpoint = fields.next()?;
    let epoch = match (checkpoint, fields.next()) {
        ("final", None) => CheckpointId::FINAL.get() - 1,
        (digits, None) => digits.parse::<u64>().ok()?.checked_sub(1)?,
        (digits, Some(seq)) => {
            seq.parse::<u32>().ok()?;
            digits.parse().ok()?
        }
    };
    Some((instance, epoch))
}

impl<T: Data> OpenStore<T> {
    /// The object of folder `folder`, begun if there is none.
    fn object(&mut self, folder: &str) -> Result<&mut Object<T>, ConnectorError> {
        if !self.objects.contains_key(folder) {
            let file = format!(
                "part-{}-{:020}-{:04}{}",
                self.instance, self.epoch, self.seq, self.extension
            );
            self.seq += 1;
            let name = match folder {
                "" => file,
                folder => format!("{folder}/{file}"),
            };
            let object = Object {
                upload: self.client.begin(name)?,
                writer: None,
                buffer: Vec::new(),
                begun: Instant::now(),
            };
            self.objects.insert(folder.to_string(), object);
        }
        self.objects.get_mut(folder).ok_or_else(not_open)
    }

    /// Sends the object's buffer as a part once it holds one.
    fn send_full_part(&mut self, folder: &str) -> Result<(), ConnectorError> {
        let part_bytes = self.client.prefix.part_bytes;
        let OpenStore {
            objects, client, ..
        } = self;
        if let Some(object) = objects.get_mut(folder)
            && object.buffer.len() >= part_bytes
        {
            let part = std::mem::replace(&mut object.buffer, Vec::with_capacity(part_bytes));
            object.upload.send(client, part)?;
        }
        Ok(())
    }

    /// Closes the object of `folder`: its rest sent as the last part,
    /// completed once checkpoint `due` is (`None`: the next barrier's).
    fn close(&mut self, folder: &str, due: Option<u64>) -> Result<(), ConnectorError> {
        if let Some(object) = self.objects.remove(folder) {
            let closed = object.upload.close(&self.client, object.buffer, due)?;
            self.closed.push(closed);
        }
        Ok(())
    }
}

impl<T: Data> Transactional for StoreFileSink<T> {}

impl<T: Data> Sink for StoreFileSink<T> {
    type In = T;

    fn exactly_once(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        let extension = match &mut self.format {
            ObjectFormat::Lines {
                format,
                compression,
                ..
            } => {
                format.check(&format!("object-store file sink `{}`", ctx.component()))?;
                compression.extension()
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => {
                format.open(ctx.component())?;
                ".parquet"
            }
        };
        let uploads = self.prefix.uploads.clone().ok_or_else(|| {
            ConnectorError::user(format!(
                "object-store file sink `{}`: {:?} was made without multipart uploads, which the sink writes through: make it with `StorePrefix::s3` or `StorePrefix::with_uploads`",
                ctx.component(),
                self.prefix
            ))
        })?;
        // One worker thread: parts go up while the task encodes the next.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| ConnectorError::io("starting an object-store client", e))?;
        self.open = Some(OpenStore {
            client: Client {
                store: self.prefix.store.clone(),
                uploads,
                prefix: self.prefix.clone(),
                runtime: Arc::new(runtime),
            },
            instance: ctx.instance().0,
            component: ctx.component().to_string(),
            extension,
            epoch: 0,
            seq: 0,
            objects: BTreeMap::new(),
            closed: Vec::new(),
            line: Vec::new(),
            header: None,
            checkpointed: Vec::new(),
        });
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        let StoreFileSink { format, open, .. } = self;
        let open = open.as_mut().ok_or_else(not_open)?;
        let cannot = |component: &str, reason: FormatError| {
            ConnectorError::user(format!(
                "object-store file sink `{component}`: cannot encode a record: {reason}"
            ))
        };
        match format {
            ObjectFormat::Lines {
                format,
                compression,
                roll,
            } => {
                use std::io::Write;
                let io = |e| ConnectorError::io("encoding output", e);
                open.line.clear();
                format
                    .encode(&record.value, &mut open.line, &mut open.header)
                    .map_err(|reason| cannot(&open.component, reason))?;
                // The header goes at the start of an object: read only when
                // a member begins, not per record.
                let member_begins = open.objects.get("").is_none_or(|o| o.writer.is_none());
                let header = member_begins.then(|| open.header.clone()).flatten();
                let line = std::mem::take(&mut open.line);
                let object = open.object("")?;
                if object.writer.is_none() {
                    let fresh = object.upload.uploaded() == 0 && object.buffer.is_empty();
                    let mut encoder = compression.encoder(Vec::new()).map_err(io)?;
                    if let (true, Some(header)) = (fresh, &header) {
                        encoder.write_all(header).map_err(io)?;
                    }
                    object.writer = Some(ObjectWriter::Lines(encoder));
                }
                let mut size = 0;
                if let Some(ObjectWriter::Lines(encoder)) = object.writer.as_mut() {
                    encoder.write_all(&line).map_err(io)?;
                    let encoded = encoder.get_mut();
                    if encoded.len() >= DRAIN_BYTES {
                        object.buffer.append(encoded);
                    }
                    size = object.upload.uploaded() + (object.buffer.len() + encoded.len()) as u64;
                }
                if roll.is_some_and(|roll| size >= roll.max_bytes) {
                    if let Some(ObjectWriter::Lines(encoder)) = object.writer.take() {
                        let rest = encoder.finish().map_err(io)?;
                        object.buffer.extend_from_slice(&rest);
                    }
                    open.line = line;
                    return open.close("", None);
                }
                open.line = line;
                open.send_full_part("")
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet(format) => {
                let folder = format
                    .folder(&record.value, record.time)
                    .map_err(|reason| cannot(&open.component, reason))?;
                let object = open.object(&folder)?;
                let pushed = (|| {
                    if object.writer.is_none() {
                        object.writer = Some(ObjectWriter::Parquet(format.writer()?));
                    }
                    if let Some(ObjectWriter::Parquet(writer)) = object.writer.as_mut() {
                        format.push(writer, record.value)?;
                        let encoded = format.encoded(writer);
                        if encoded.len() >= DRAIN_BYTES {
                            object.buffer.append(encoded);
                        }
                    }
                    Ok(())
                })();
                pushed.map_err(|reason| cannot(&open.component, reason))?;
                open.send_full_part(&folder)
            }
        }
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let StoreFileSink { format, open, .. } = self;
        let open = open.as_mut().ok_or_else(not_open)?;
        let id = checkpoint.get();
        // End what is being encoded: a whole stream up to the barrier.
        for object in open.objects.values_mut() {
            match object.writer.take() {
                None => {}
                Some(ObjectWriter::Lines(encoder)) => {
                    let rest = encoder
                        .finish()
                        .map_err(|e| ConnectorError::io("encoding output", e))?;
                    object.buffer.extend_from_slice(&rest);
                }
                #[cfg(feature = "parquet")]
                Some(ObjectWriter::Parquet(writer)) => {
                    let ObjectFormat::Parquet(format) = &*format else {
                        return Err(not_open());
                    };
                    let rest = format.finish(writer).map_err(|reason| {
                        ConnectorError::user(format!(
                            "object-store file sink `{}`: cannot encode Parquet: {reason}",
                            open.component
                        ))
                    })?;
                    object.buffer.extend_from_slice(&rest);
                }
                #[cfg(not(feature = "parquet"))]
                Some(ObjectWriter::Never(_)) => {}
            }
        }
        // Close what rolls here: everything at the end, Parquet (a bulk
        // format) and objects without rolling at every barrier.
        let keep_open = |object: &Object<T>| match &*format {
            ObjectFormat::Lines {
                roll: Some(roll), ..
            } => !checkpoint.is_final() && object.begun.elapsed() < roll.max_age,
            _ => false,
        };
        let closing: Vec<String> = open
            .objects
            .iter()
            .filter(|(_, object)| !keep_open(object))
            .map(|(folder, _)| folder.clone())
            .collect();
        for folder in closing {
            open.close(&folder, Some(id))?;
        }
        for closed in &mut open.closed {
            closed.due.get_or_insert(id);
        }
        let OpenStore {
            objects, client, ..
        } = open;
        let mut still_open: Vec<Open> = Vec::with_capacity(objects.len());
        let mut tails: Vec<&[u8]> = Vec::with_capacity(objects.len());
        for object in objects.values_mut() {
            still_open.push(object.upload.checkpointed(client, &object.buffer)?);
            tails.push(&object.buffer);
        }
        let part = Checkpointed {
            closed: open.closed.clone(),
            open: still_open,
        };
        open.checkpointed = part.encode(&tails);
        if !checkpoint.is_final() {
            (open.epoch, open.seq) = (id, 0);
        }
        Ok(())
    }

    /// The parts in and the bytes not yet sent of every object, as of the
    /// last barrier.
    fn snapshot(&mut self, _: CheckpointId) -> Result<Option<StateBytes>, ConnectorError> {
        let open = self.open.as_mut().ok_or_else(not_open)?;
        Ok(Some(StateBytes::new(
            SCHEMA,
            std::mem::take(&mut open.checkpointed),
        )))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<(), ConnectorError> {
        let open = self.open.as_mut().ok_or_else(not_open)?;
        let mut result = Ok(());
        let client = &open.client;
        open.closed.retain(|closed| {
            let due = closed.due.is_some_and(|due| due <= checkpoint.get());
            if !due || result.is_err() {
                return true;
            }
            match client.complete(closed) {
                Ok(()) => false,
                Err(e) => {
                    result = Err(e);
                    true
                }
            }
        });
        result
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        if self.open.is_some() {
            crate::commit::commit_at_end(self)?;
        }
        Ok(())
    }

    /// Completes what the restored checkpoint holds for this instance's
    /// share of the old instances (`k % parallelism`), aborts their
    /// uploads begun after it, and refuses a run from before an object it
    /// finds.
    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), ConnectorError> {
        let open = self.open.as_mut().ok_or_else(not_open)?;
        let parallelism = restore.parallelism.max(1);
        let mine = |instance: u32| instance % parallelism == restore.instance.0;
        let from = || match restore.is_fresh() {
            true => "no checkpoint".to_string(),
            false => format!("checkpoint {}", restore.checkpoint),
        };
        // Only the objects of the instances this one answers for: its own
        // and the removed ones it inherits. The others' are theirs to
        // check, and this run's other instances may already be writing.
        let listed = self.prefix.list_under(&open.client.runtime, "")?;
        for (name, _) in &listed {
            let file_name = name.rsplit('/').next().unwrap_or(name);
            let Some((instance, epoch)) = instance_and_epoch(file_name) else {
                continue;
            };
            // An old instance that had ended is covered to its end.
            if mine(instance) && epoch >= restore.covers(InstanceIdx(instance)).get() {
                return Err(ConnectorError::user(format!(
                    "object-store file sink `{}` finds {name} under {:?}, written after {}, which this run starts from: it would be written twice. Point the job at the checkpoints it was written with, or remove the prefix's objects to start over",
                    restore.component,
                    self.prefix,
                    from()
                )));
            }
        }
        for part in &restore.parts {
            let old = part.part.0;
            if !mine(old) {
                continue;
            }
            let damaged = || {
                ConnectorError::user(format!(
                    "object-store file sink `{}`: the checkpointed output of instance {old} has schema {} or is damaged (this version reads {SCHEMA} and {SCHEMA_WHOLE_OBJECTS}): restore with the version that wrote it",
                    restore.component, part.schema
                ))
            };
            match part.schema {
                SCHEMA => {
                    let (checkpointed, tails) =
                        Checkpointed::decode(part.bytes).ok_or_else(damaged)?;
                    for closed in &checkpointed.closed {
                        open.client.complete(closed)?;
                    }
                    for (object, tail) in checkpointed.open.into_iter().zip(tails) {
                        if open.client.size(&object.name)?.is_some() {
                            return Err(ConnectorError::user(format!(
                                "object-store file sink `{}` finds {} under {:?} complete, while {} has it in progress: it was completed after that checkpoint, and would be written twice. Point the job at the checkpoints it was written with, or remove the prefix's objects to start over",
                                restore.component,
                                object.name,
                                self.prefix,
                                from()
                            )));
                        }
                        let closed = object.close(&open.client, tail)?;
                        open.client.complete(&closed)?;
                    }
                }
                SCHEMA_WHOLE_OBJECTS => {
                    let staged = decode_whole_objects(part.bytes).ok_or_else(damaged)?;
                    for (checkpoint, bytes) in staged {
                        let checkpoint = match CheckpointId::new(checkpoint) {
                            c if c.is_final() => "final".to_string(),
                            c => format!("{:020}", c.get()),
                        };
                        let name = format!("part-{old}-{checkpoint}{}", open.extension);
                        let object = open.client.object(&name);
                        open.client
                            .runtime
                            .block_on(object_store::ObjectStoreExt::put(
                                &*open.client.store,
                                &object,
                                PutPayload::from(bytes),
                            ))
                            .map_err(|e| {
                                ConnectorError::io(
                                    format!("putting {object} into {:?}", self.prefix),
                                    std::io::Error::other(e),
                                )
                            })?;
                    }
                }
                _ => return Err(damaged()),
            }
        }
        // Uploads begun after the checkpoint: nobody will complete them.
        for marked in open.client.marked()? {
            if instance_and_epoch(&marked.file_name).is_some_and(|(instance, _)| mine(instance)) {
                open.client.abort(&marked)?;
            }
        }
        open.epoch = match restore.is_fresh() {
            true => 0,
            false => restore.checkpoint.get(),
        };
        open.seq = 0;
        Ok(())
    }
}

/// Version 1's part: `count`, then per checkpoint `checkpoint`, `length`
/// and the object's bytes (little endian).
fn decode_whole_objects(mut bytes: &[u8]) -> Option<BTreeMap<u64, Vec<u8>>> {
    let mut take = |n: usize| -> Option<&[u8]> {
        let head = bytes.get(..n)?;
        bytes = &bytes[n..];
        Some(head)
    };
    let number = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let count = number(take(8)?);
    let mut staged = BTreeMap::new();
    for _ in 0..count {
        let checkpoint = number(take(8)?);
        let len = usize::try_from(number(take(8)?)).ok()?;
        staged.insert(checkpoint, take(len)?.to_vec());
    }
    bytes.is_empty().then_some(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_one_parts_are_still_read_and_cut_ones_refused() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&2u64.to_le_bytes());
        for (checkpoint, object) in [(3u64, &b"a\nb\n"[..]), (u64::MAX, &b""[..])] {
            bytes.extend_from_slice(&checkpoint.to_le_bytes());
            bytes.extend_from_slice(&(object.len() as u64).to_le_bytes());
            bytes.extend_from_slice(object);
        }
        let staged = decode_whole_objects(&bytes).unwrap();
        assert_eq!(staged.get(&3).map(Vec::as_slice), Some(&b"a\nb\n"[..]));
        assert_eq!(staged.get(&u64::MAX).map(Vec::len), Some(0));
        for cut in 0..bytes.len() {
            assert_eq!(decode_whole_objects(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn object_names_give_their_instance_and_epoch() {
        let cases = [
            ("part-3-00000000000000000007-0002.gz", Some((3, 7))),
            ("part-0-00000000000000000000-0000.parquet", Some((0, 0))),
            ("part-12-00000000000000000042.csv", Some((12, 41))),
            ("part-1-final", Some((1, u64::MAX - 1))),
            ("part-1-00000000000000000000", None),
            ("part-x-1-0", None),
            ("other.csv", None),
            ("part-1-2-x", None),
        ];
        for (name, expected) in cases {
            assert_eq!(instance_and_epoch(name), expected, "{name}");
        }
    }
}
