//! The loops that drive tasks: poll a source, or receive messages and hand
//! them to the instance, flushing whenever there is nothing to do right now.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, TryRecvError};
use streamwork_core::exec::{InputTask, SourceTask};
use streamwork_core::message::{Control, Envelope, Payload};
use streamwork_core::{SourcePoll, TaskError};

use crate::channel::ABORT_POLL;

/// How a task ended without error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its input ended (or, for a source, it was stopped) and it ended its outputs.
    Completed,
    /// The job was aborted by another task's failure.
    Aborted,
}

/// Flags shared by every task of a job.
#[derive(Clone)]
pub(crate) struct Flags {
    /// Graceful stop: sources end their streams, everything drains.
    pub(crate) stop: Arc<AtomicBool>,
    /// Failure elsewhere: stop now.
    pub(crate) abort: Arc<AtomicBool>,
}

pub(crate) fn run_source(task: &mut dyn SourceTask, flags: &Flags) -> Result<Ended, TaskError> {
    task.open()?;
    loop {
        if flags.abort.load(Ordering::Relaxed) {
            return Ok(Ended::Aborted);
        }
        if flags.stop.load(Ordering::Relaxed) {
            break;
        }
        match task.poll()? {
            SourcePoll::Emitted => {}
            SourcePoll::Idle => task.flush()?,
            SourcePoll::Finished => break,
        }
    }
    task.finish()?;
    Ok(Ended::Completed)
}

pub(crate) fn run_input(
    task: &mut dyn InputTask,
    ports: &[Receiver<Envelope>],
    senders_per_port: &[u32],
    flags: &Flags,
) -> Result<Ended, TaskError> {
    task.open()?;
    let mut ended = vec![0u32; ports.len()];
    let mut open: Vec<usize> = (0..ports.len())
        .filter(|&p| senders_per_port[p] > 0)
        .collect();
    for (port, &senders) in senders_per_port.iter().enumerate() {
        if senders == 0 {
            task.on_port_end(port)?;
        }
    }
    let mut next_port = 0usize;
    while !open.is_empty() {
        let (port, envelope) = match receive(task, ports, &open, &mut next_port, flags)? {
            Some(received) => received,
            None => return Ok(Ended::Aborted),
        };
        match envelope.payload {
            Payload::Batch(batch) => task.on_batch(port, envelope.from, batch)?,
            Payload::Control(Control::EndOfStream) => {
                ended[port] += 1;
                if ended[port] == senders_per_port[port] {
                    open.retain(|&p| p != port);
                    task.on_port_end(port)?;
                }
            }
            Payload::Control(_) => {}
        }
    }
    task.finish()?;
    Ok(Ended::Completed)
}

/// The next message from any open port: without blocking if one is ready;
/// otherwise flush (adaptive flushing) and block until one arrives. `None`
/// when the job is aborted.
fn receive(
    task: &mut dyn InputTask,
    ports: &[Receiver<Envelope>],
    open: &[usize],
    next_port: &mut usize,
    flags: &Flags,
) -> Result<Option<(usize, Envelope)>, TaskError> {
    for i in 0..open.len() {
        let port = open[(*next_port + i) % open.len()];
        match ports[port].try_recv() {
            Ok(envelope) => {
                *next_port = (*next_port + i + 1) % open.len();
                return Ok(Some((port, envelope)));
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return disconnected(flags),
        }
    }
    task.flush()?;
    loop {
        if flags.abort.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let [port] = open {
            match ports[*port].recv_timeout(ABORT_POLL) {
                Ok(envelope) => return Ok(Some((*port, envelope))),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return disconnected(flags),
            }
        }
        let mut select = Select::new();
        for &port in open {
            select.recv(&ports[port]);
        }
        let Ok(ready) = select.ready_timeout(ABORT_POLL) else {
            continue;
        };
        let port = open[ready];
        match ports[port].try_recv() {
            Ok(envelope) => return Ok(Some((port, envelope))),
            Err(TryRecvError::Empty) => continue,
            Err(TryRecvError::Disconnected) => return disconnected(flags),
        }
    }
}

fn disconnected<T>(flags: &Flags) -> Result<Option<T>, TaskError> {
    if flags.abort.load(Ordering::Relaxed) {
        Ok(None)
    } else {
        Err(TaskError::UpstreamFailed)
    }
}
