//! Stopping jobs on Ctrl-C (SIGINT/SIGTERM): one process-wide handler that
//! raises the stop flag of every job that asked for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::JobError;
use crate::handle::JobHandle;

/// The stop flags of the jobs to stop on Ctrl-C.
fn registry() -> &'static Mutex<Vec<Weak<AtomicBool>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Weak<AtomicBool>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

/// Raises every registered stop flag; a second Ctrl-C, while the jobs stop,
/// exits the process.
fn on_ctrl_c() {
    let flags = registry().lock().unwrap_or_else(|p| p.into_inner());
    let mut any_set = false;
    for flag in flags.iter().filter_map(Weak::upgrade) {
        any_set |= flag.swap(true, Ordering::Relaxed);
    }
    if any_set {
        std::process::exit(130);
    }
    eprintln!("streamwork: stopping (Ctrl-C again to exit at once)");
}

impl JobHandle {
    /// Stops this job gracefully on Ctrl-C (SIGINT/SIGTERM). A second Ctrl-C
    /// while stopping exits the process with status 130.
    pub fn stop_on_ctrl_c(&self) -> Result<(), JobError> {
        raise_on_ctrl_c(self.stop_flag())
    }
}

/// Raises `flag` on Ctrl-C (SIGINT/SIGTERM), for what stops itself when it
/// sees the flag (a scale-out runner leaving its group). A second Ctrl-C
/// while stopping exits the process with status 130.
pub fn raise_on_ctrl_c(flag: &Arc<AtomicBool>) -> Result<(), JobError> {
    static INSTALLED: OnceLock<Result<(), Arc<ctrlc::Error>>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| ctrlc::set_handler(on_ctrl_c).map_err(Arc::new));
    installed.clone().map_err(JobError::CtrlC)?;
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Arc::downgrade(flag));
    Ok(())
}
