//! Errors a user reads: what `fn main() -> Result<(), Box<dyn Error>>`
//! prints (the `Debug` form) is the `Display` message, and walking an
//! error's chain (as anyhow's `{:#}` or an error reporter does) shows each
//! cause once, never "external error: external error: ...".

use std::error::Error;

use streamwork::core::{ConnectorError, InstanceIdx, TaskError};
use streamwork::prelude::*;
use streamwork::runtime::GraphError;
use streamwork::state::StateError;

/// The message and every cause, joined as a chain printer joins them.
fn chain(error: &dyn Error) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

fn disk_failure() -> JobError {
    JobError::Failed {
        component: "counts".into(),
        instance: InstanceIdx(1),
        error: TaskError::Connector(ConnectorError::io(
            "writing `out/part-1`",
            std::io::Error::other("no space left on device"),
        )),
    }
}

fn errors() -> Vec<Box<dyn Error>> {
    vec![
        Box::new(disk_failure()),
        Box::new(JobError::Checkpoint(StateError::Io {
            action: "write",
            path: "ckpt/segment-1".into(),
            error: std::io::Error::other("read-only file system"),
        })),
        Box::new(StateError::Io {
            action: "map",
            path: "ckpt/segment-2".into(),
            error: std::io::Error::other("read-only file system"),
        }),
        Box::new(JobError::Graph(GraphError::NoSource { job: "j".into() })),
        Box::new(JobError::CannotKeepDelivery {
            component: "out".into(),
            delivery: Delivery::ExactlyOnce,
            problem: "it is neither transactional nor idempotent".into(),
        }),
        Box::new(TaskError::Restore("layout 3 is newer than 2".into())),
    ]
}

#[test]
fn main_prints_the_message_not_the_fields() {
    for error in errors() {
        // `Box<dyn Error>`'s Debug is the error's: what `main` prints.
        assert_eq!(format!("{error:?}"), error.to_string());
    }
    let failure = disk_failure();
    assert_eq!(
        format!("{failure:?}"),
        "component `counts` instance 1 failed: external error: writing `out/part-1`: no space left on device"
    );
}

#[test]
fn a_chain_printer_shows_each_cause_once() {
    for error in errors() {
        let printed = chain(error.as_ref());
        for cause in [
            "external error",
            "no space left on device",
            "read-only file system",
            "no source",
        ] {
            assert!(
                printed.matches(cause).count() <= 1,
                "`{cause}` is repeated in: {printed}"
            );
        }
    }
}

#[test]
fn a_connector_error_says_its_cause_even_when_the_message_does_not() {
    let error = ConnectorError {
        domain: streamwork::core::ErrorDomain::External,
        message: "connecting to the broker".into(),
        source: Some(Box::new(std::io::Error::other("connection refused"))),
    };
    assert_eq!(
        error.to_string(),
        "external error: connecting to the broker: connection refused"
    );
    assert_eq!(chain(&error), error.to_string());
}
