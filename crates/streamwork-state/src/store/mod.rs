//! The state store: keyed state that lives in the checkpoint log.
//!
//! A [`StoredState`] keeps in memory only what changed since the last
//! checkpoint and the keys read recently; everything else is read in place
//! from *runs*, immutable sorted batches of entries that checkpoints write
//! beside the instance's part in the log. It is a log-structured merge tree
//! (O'Neil et al., 1996) whose levels are runs in the checkpoint log, with
//! size-tiered merging, and whose write-ahead log is the replay of the
//! sources since the last checkpoint.

mod run;
mod stored;
mod ttl;

pub use stored::{StoreOptions, StoredState};
pub use ttl::{Expiring, ExpiringState, Ttl, TtlTime};
