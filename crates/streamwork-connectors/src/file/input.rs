//! A file source's input: the files it reads, listed in a plan that a
//! checkpoint records and a restore compares, wherever the files are.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use streamwork_core::ConnectorError;

/// `path` as an object-store URL (`s3://...`), if it is one.
pub(super) fn store_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| p.starts_with("s3://"))
}

/// A file read from wherever the input is.
pub(super) trait InputFile: Read + Seek + Send {}

impl<F: Read + Seek + Send> InputFile for F {}

/// The files of input `path` (a file, or a directory's files and its
/// subdirectories', as Hive-style partitioned output has them), in path
/// order, with their sizes. Hidden names (`.name`, `_name`) are not input:
/// a transactional sink's staging and markers, `_SUCCESS` files.
pub(super) fn list_input(path: &Path) -> Result<Vec<(PathBuf, u64)>, ConnectorError> {
    let io = |what: &str, e| ConnectorError::io(format!("{what} {}", path.display()), e);
    let meta = std::fs::metadata(path).map_err(|e| io("reading input", e))?;
    if !meta.is_dir() {
        return Ok(vec![(path.to_path_buf(), meta.len())]);
    }
    let mut files = Vec::new();
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let io = |e| ConnectorError::io(format!("listing directory {}", dir.display()), e);
        for entry in std::fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let meta = entry.metadata().map_err(io)?;
            let name = entry.file_name();
            let hidden = name
                .to_str()
                .is_some_and(|n| n.starts_with('.') || n.starts_with('_'));
            if hidden {
                continue;
            }
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file() {
                files.push((entry.path(), meta.len()));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The plan as a checkpoint records it: file names (relative to the input
/// directory `root`, or the file's own name) and sizes, so that an input
/// moved elsewhere whole still matches.
pub(super) fn plan_names(root: &Path, plan: &[(PathBuf, u64)]) -> Vec<(String, u64)> {
    plan.iter()
        .map(|(path, size)| {
            let name = match path.strip_prefix(root) {
                Ok(relative) if !relative.as_os_str().is_empty() => relative,
                _ => path.file_name().map(Path::new).unwrap_or(path),
            };
            (name.to_string_lossy().into_owned(), *size)
        })
        .collect()
}

/// What differs between the checkpointed plan and the input now.
pub(super) fn describe_change(then: &[(String, u64)], now: &[(String, u64)]) -> String {
    let then_map: BTreeMap<&str, u64> = then.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let now_map: BTreeMap<&str, u64> = now.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut changes = Vec::new();
    for (name, size) in &then_map {
        match now_map.get(name) {
            None => changes.push(format!("{name} is gone")),
            Some(now) if now != size => {
                changes.push(format!("{name} was {size} bytes and is {now}"))
            }
            Some(_) => {}
        }
    }
    for name in now_map.keys().filter(|n| !then_map.contains_key(*n)) {
        changes.push(format!("{name} is new"));
    }
    changes.join(", ")
}

/// Where a file source's files are.
#[derive(Clone)]
pub(super) enum Input {
    /// On local disk, at the source's path.
    Local,
    /// Objects under a prefix of an object store.
    #[cfg(feature = "s3")]
    Store(super::store::StoreInput),
}

impl Input {
    /// Whether `path` is read from local disk (not from an object store,
    /// whose reads wait on the network).
    pub(super) fn is_local(&self, path: &Path) -> bool {
        matches!(self, Input::Local) && store_url(path).is_none()
    }

    /// Ready to read `path` (a client for a store); a local `path` that is
    /// an object-store URL, `s3://bucket/prefix`, reads that store.
    pub(super) fn start(&mut self, path: &Path) -> Result<(), ConnectorError> {
        match self {
            Input::Local => match store_url(path) {
                None => Ok(()),
                #[cfg(feature = "s3")]
                Some(url) => {
                    let prefix = super::store::StorePrefix::url(url)?;
                    *self = Input::Store(super::store::StoreInput::new(prefix));
                    self.start(path)
                }
                #[cfg(not(feature = "s3"))]
                Some(url) => Err(ConnectorError::user(format!(
                    "the file source's input {url} is on object storage, which needs Streamwork's `s3` feature: enable it"
                ))),
            },
            #[cfg(feature = "s3")]
            Input::Store(store) => store.start(),
        }
    }

    /// The files, in path order, with their sizes.
    pub(super) fn list(&self, path: &Path) -> Result<Vec<(PathBuf, u64)>, ConnectorError> {
        match self {
            Input::Local => list_input(path),
            #[cfg(feature = "s3")]
            Input::Store(store) => store.list(),
        }
    }

    /// What file names are relative to, in the checkpointed plan.
    pub(super) fn root<'a>(&self, path: &'a Path) -> &'a Path {
        match self {
            Input::Local => path,
            #[cfg(feature = "s3")]
            Input::Store(_) => Path::new(""),
        }
    }

    /// File `path` of the plan, to read and seek.
    pub(super) fn open(&self, path: &Path) -> std::io::Result<Box<dyn InputFile>> {
        match self {
            Input::Local => Ok(Box::new(File::open(path)?)),
            #[cfg(feature = "s3")]
            Input::Store(store) => Ok(Box::new(store.open(path)?)),
        }
    }
}
