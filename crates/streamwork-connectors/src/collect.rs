//! A sink that keeps what it receives, for tests.

use std::sync::{Arc, Mutex};

use streamwork_core::{ConnectorError, Data, InstanceContext, Record, Sink};

/// Records received so far, with the receiving instance.
type Received<T> = Arc<Mutex<Vec<(u32, Record<T>)>>>;

/// Keeps every record it receives, with the index of the instance that
/// received it, in a shared buffer the test reads after the job. Records are
/// appended once per flush, not per record.
///
/// ```
/// use streamwork_connectors::CollectSink;
/// let sink = CollectSink::<u64>::new();
/// assert!(sink.values().is_empty());
/// ```
pub struct CollectSink<T> {
    shared: Received<T>,
    pending: Vec<(u32, Record<T>)>,
    instance: u32,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            shared: self.shared.clone(),
            pending: Vec::new(),
            instance: self.instance,
        }
    }
}

impl<T: Data> Default for CollectSink<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Data> CollectSink<T> {
    /// An empty collector.
    pub fn new() -> Self {
        CollectSink {
            shared: Arc::new(Mutex::new(Vec::new())),
            pending: Vec::new(),
            instance: 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u32, Record<T>)>> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every value received, in arrival order.
    pub fn values(&self) -> Vec<T> {
        self.lock().iter().map(|(_, r)| r.value.clone()).collect()
    }

    /// Every record received, with the instance that received it.
    pub fn records(&self) -> Vec<(u32, Record<T>)> {
        self.lock().clone()
    }

    /// Values received by instance `instance`.
    pub fn values_of_instance(&self, instance: u32) -> Vec<T> {
        self.lock()
            .iter()
            .filter(|(i, _)| *i == instance)
            .map(|(_, r)| r.value.clone())
            .collect()
    }
}

impl<T: Data> Sink for CollectSink<T> {
    type In = T;

    fn open(&mut self, ctx: &InstanceContext) -> Result<(), ConnectorError> {
        self.instance = ctx.instance().0;
        Ok(())
    }

    fn write(&mut self, record: Record<T>) -> Result<(), ConnectorError> {
        self.pending.push((self.instance, record));
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if !self.pending.is_empty() {
            let mut pending = std::mem::take(&mut self.pending);
            self.lock().append(&mut pending);
        }
        Ok(())
    }
}
