//! An object uploaded in parts as it is written, invisible until its
//! upload is completed (S3's multipart uploads), and what a checkpoint
//! keeps of it so that whoever restores, on any machine, can complete it.
//!
//! Each upload leaves a marker, `PREFIX/_streamwork-uploads/NAME/HEX(ID)`,
//! from its creation (before any part) to its completion or abort: an
//! upload a failure left behind that no checkpoint knows (begun after the
//! last one) is found by its marker and aborted by the next owner. A name
//! beginning with `_` is hidden from readers (ours, Spark's, pyarrow's).

use std::collections::VecDeque;
use std::sync::Arc;

use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use streamwork_core::ConnectorError;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use super::StorePrefix;

/// Parts in flight per upload at most: a third waits for the first.
const IN_FLIGHT: usize = 2;

/// Where the markers of uploads in progress are, under the prefix.
pub(super) const MARKERS: &str = "_streamwork-uploads";

/// The stores an upload talks to.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) uploads: Arc<dyn MultipartStore>,
    pub(super) prefix: StorePrefix,
    pub(super) runtime: Arc<Runtime>,
}

impl Client {
    /// The object named `name` (relative to the prefix).
    pub(super) fn object(&self, name: &str) -> ObjectPath {
        self.prefix.object(name)
    }

    fn marker(&self, name: &str, id: &str) -> ObjectPath {
        let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
        self.prefix.object(&format!("{MARKERS}/{name}/{hex}"))
    }

    fn fail(&self, what: String, e: object_store::Error) -> ConnectorError {
        ConnectorError::io(
            format!("{what} under {:?}", self.prefix),
            std::io::Error::other(e),
        )
    }

    /// The size of object `name`, if it exists.
    pub(super) fn size(&self, name: &str) -> Result<Option<u64>, ConnectorError> {
        let path = self.object(name);
        match self.runtime.block_on(self.store.head(&path)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail(format!("looking up {path}"), e)),
        }
    }

    /// Begins uploading object `name`: the upload, then its marker.
    pub(super) fn begin(&self, name: String) -> Result<Upload, ConnectorError> {
        let path = self.object(&name);
        let id = self
            .runtime
            .block_on(self.uploads.create_multipart(&path))
            .map_err(|e| self.fail(format!("beginning an upload of {path}"), e))?;
        let marker = self.marker(&name, &id);
        self.runtime
            .block_on(self.store.put(&marker, PutPayload::default()))
            .map_err(|e| self.fail(format!("marking the upload of {path}"), e))?;
        Ok(Upload {
            name,
            id,
            parts: Vec::new(),
            uploaded: 0,
            in_flight: VecDeque::new(),
        })
    }

    /// Uploads every part of `closed` not yet in, completes it and removes
    /// its marker. Done already (the object is there at its size) is
    /// done; there at another size, the object was written after the
    /// checkpoint that knew the upload: refused.
    pub(super) fn complete(&self, closed: &Closed) -> Result<(), ConnectorError> {
        let path = self.object(&closed.name);
        let parts: Vec<PartId> = closed
            .parts
            .iter()
            .map(|etag| PartId {
                content_id: etag.clone(),
            })
            .collect();
        let done = self
            .runtime
            .block_on(self.uploads.complete_multipart(&path, &closed.id, parts));
        if let Err(e) = done {
            match self.size(&closed.name)? {
                Some(size) if size == closed.size => {}
                Some(size) => {
                    return Err(ConnectorError::user(format!(
                        "object-store file sink: {path} under {:?} has {size} bytes where its checkpoint has {}: it was written after that checkpoint, which this run starts from, and would be written twice. Point the job at the checkpoints it was written with, or remove the prefix's objects to start over",
                        self.prefix, closed.size
                    )));
                }
                None => {
                    return Err(self.fail(
                        format!(
                            "completing the upload of {path} (gone: a bucket lifecycle rule that aborts incomplete uploads sooner than checkpoints complete loses output)"
                        ),
                        e,
                    ));
                }
            }
        }
        self.unmark(&closed.name, &closed.id)
    }

    /// Aborts upload `marked` (gone already is fine) and removes its
    /// marker.
    pub(super) fn abort(&self, marked: &Marked) -> Result<(), ConnectorError> {
        let path = &marked.object;
        match self
            .runtime
            .block_on(self.uploads.abort_multipart(path, &marked.id))
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.fail(format!("aborting the upload of {path}"), e)),
        }
        self.delete(&marked.marker)
    }

    fn unmark(&self, name: &str, id: &str) -> Result<(), ConnectorError> {
        self.delete(&self.marker(name, id))
    }

    fn delete(&self, marker: &ObjectPath) -> Result<(), ConnectorError> {
        match self.runtime.block_on(self.store.delete(marker)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.fail(format!("removing the marker {marker}"), e)),
        }
    }

    /// The uploads the markers say are in progress.
    pub(super) fn marked(&self) -> Result<Vec<Marked>, ConnectorError> {
        let listed = self.prefix.list_under(&self.runtime, MARKERS)?;
        let under = |name: &str| {
            let full = match self.prefix.prefix.as_str() {
                "" => name.to_string(),
                prefix => format!("{prefix}/{name}"),
            };
            ObjectPath::parse(full).ok()
        };
        Ok(listed
            .into_iter()
            .filter_map(|(relative, _)| {
                let (name, hex) = relative.rsplit_once('/')?;
                Some(Marked {
                    object: under(name)?,
                    marker: under(&format!("{MARKERS}/{relative}"))?,
                    id: unhex(hex)?,
                    file_name: name.rsplit('/').next().unwrap_or(name).to_string(),
                })
            })
            .collect())
    }
}

/// An upload in progress, as its marker names it.
pub(super) struct Marked {
    pub(super) object: ObjectPath,
    pub(super) marker: ObjectPath,
    pub(super) id: String,
    /// The object's name without its folders.
    pub(super) file_name: String,
}

fn unhex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// An upload in progress: the parts in, and those on their way.
pub(super) struct Upload {
    pub(super) name: String,
    pub(super) id: String,
    /// The parts' ids (ETags), in order.
    parts: Vec<String>,
    /// Bytes in the parts, and on their way.
    uploaded: u64,
    in_flight: VecDeque<JoinHandle<object_store::Result<PartId>>>,
}

impl Upload {
    /// Bytes uploaded or on their way.
    pub(super) fn uploaded(&self) -> u64 {
        self.uploaded
    }

    /// Sends `bytes` as the next part, in the background; waits for the
    /// oldest part first when [`IN_FLIGHT`] are on their way.
    pub(super) fn send(&mut self, client: &Client, bytes: Vec<u8>) -> Result<(), ConnectorError> {
        if self.in_flight.len() >= IN_FLIGHT {
            self.settle_one(client)?;
        }
        let index = self.parts.len() + self.in_flight.len();
        self.uploaded += bytes.len() as u64;
        let uploads = client.uploads.clone();
        let (path, id) = (client.object(&self.name), self.id.clone());
        let payload = PutPayload::from(bytes);
        self.in_flight.push_back(
            client
                .runtime
                .spawn(async move { uploads.put_part(&path, &id, index, payload).await }),
        );
        Ok(())
    }

    fn settle_one(&mut self, client: &Client) -> Result<(), ConnectorError> {
        let Some(part) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let path = client.object(&self.name);
        let part = client
            .runtime
            .block_on(part)
            .map_err(|e| {
                ConnectorError::io(
                    format!("uploading a part of {path}"),
                    std::io::Error::other(e),
                )
            })?
            .map_err(|e| client.fail(format!("uploading a part of {path}"), e))?;
        self.parts.push(part.content_id);
        Ok(())
    }

    /// Waits for every part on its way.
    pub(super) fn settle(&mut self, client: &Client) -> Result<(), ConnectorError> {
        while !self.in_flight.is_empty() {
            self.settle_one(client)?;
        }
        Ok(())
    }

    /// What a checkpoint keeps: every part in, and `tail`, the bytes
    /// written and not yet sent.
    pub(super) fn checkpointed(
        &mut self,
        client: &Client,
        tail: &[u8],
    ) -> Result<Open, ConnectorError> {
        self.settle(client)?;
        Ok(Open {
            name: self.name.clone(),
            id: self.id.clone(),
            parts: self.parts.clone(),
            uploaded: self.uploaded,
            tail: tail.len() as u64,
        })
    }

    /// Sends `last` as the last part and waits for every part: ready to
    /// complete once `due` is.
    pub(super) fn close(
        mut self,
        client: &Client,
        last: Vec<u8>,
        due: Option<u64>,
    ) -> Result<Closed, ConnectorError> {
        if !last.is_empty() {
            self.send(client, last)?;
        }
        self.settle(client)?;
        Ok(Closed {
            name: self.name,
            id: self.id,
            parts: self.parts,
            size: self.uploaded,
            due,
        })
    }
}

/// An upload with every part in, completed once checkpoint `due` is
/// (`None`: the next barrier's).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Closed {
    pub(super) name: String,
    pub(super) id: String,
    pub(super) parts: Vec<String>,
    pub(super) size: u64,
    pub(super) due: Option<u64>,
}

/// An upload still open at a barrier, as its checkpoint keeps it; its
/// `tail` bytes follow the checkpointed part's header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Open {
    pub(super) name: String,
    pub(super) id: String,
    pub(super) parts: Vec<String>,
    pub(super) uploaded: u64,
    pub(super) tail: u64,
}

impl Open {
    /// Sends `tail` as the last part: what the checkpoint holds of the
    /// object, ready to complete. A part of the same number that the
    /// failed run sent after the checkpoint is replaced; later ones are
    /// left out of the completed object.
    pub(super) fn close(self, client: &Client, tail: &[u8]) -> Result<Closed, ConnectorError> {
        let upload = Upload {
            name: self.name,
            id: self.id,
            parts: self.parts,
            uploaded: self.uploaded,
            in_flight: VecDeque::new(),
        };
        upload.close(client, tail.to_vec(), None)
    }
}

/// A sink instance's part of a checkpoint (schema 2): a JSON header, then
/// the open uploads' tails in order.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Checkpointed {
    pub(super) closed: Vec<Closed>,
    pub(super) open: Vec<Open>,
}

impl Checkpointed {
    /// `u64` header length (little endian), the header, the tails.
    pub(super) fn encode(&self, tails: &[&[u8]]) -> Vec<u8> {
        let header = serde_json::to_vec(self).unwrap_or_default();
        let mut out =
            Vec::with_capacity(8 + header.len() + tails.iter().map(|t| t.len()).sum::<usize>());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        for tail in tails {
            out.extend_from_slice(tail);
        }
        out
    }

    /// The part and each open upload's tail, or `None` if damaged.
    pub(super) fn decode(bytes: &[u8]) -> Option<(Checkpointed, Vec<&[u8]>)> {
        let len = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
        let header = bytes.get(8..8usize.checked_add(len)?)?;
        let part: Checkpointed = serde_json::from_slice(header).ok()?;
        let mut rest = &bytes[8 + len..];
        let mut tails = Vec::with_capacity(part.open.len());
        for open in &part.open {
            let n = usize::try_from(open.tail).ok()?;
            tails.push(rest.get(..n)?);
            rest = &rest[n..];
        }
        rest.is_empty().then_some((part, tails))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpointed_part_round_trips_and_a_cut_one_is_refused() {
        let part = Checkpointed {
            closed: vec![Closed {
                name: "date=2026-12-05/part-1-00000000000000000003-0000.parquet".into(),
                id: "abc/=+".into(),
                parts: vec!["\"e1\"".into(), "\"e2\"".into()],
                size: 10 << 20,
                due: Some(4),
            }],
            open: vec![
                Open {
                    name: "part-1-00000000000000000004-0000.csv".into(),
                    id: "x".into(),
                    parts: vec![],
                    uploaded: 0,
                    tail: 3,
                },
                Open {
                    name: "part-1-00000000000000000004-0001.csv".into(),
                    id: "y".into(),
                    parts: vec!["\"e\"".into()],
                    uploaded: 5 << 20,
                    tail: 0,
                },
            ],
        };
        let bytes = part.encode(&[b"a\nb", b""]);
        let (decoded, tails) = Checkpointed::decode(&bytes).unwrap();
        assert_eq!(decoded, part);
        assert_eq!(tails, vec![&b"a\nb"[..], &b""[..]]);
        for cut in 0..bytes.len() {
            assert!(
                Checkpointed::decode(&bytes[..cut]).is_none(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn upload_ids_round_trip_through_marker_names() {
        for id in ["", "VXBsb2FkIElE.x~y_z-", "a/b+c=", "ünï"] {
            let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
            assert_eq!(unhex(&hex).as_deref(), Some(id));
        }
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
