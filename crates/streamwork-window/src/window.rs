//! What windows produce: bounds, firing kinds, results, and the contents a
//! full-window function sees.

use streamwork_core::Timestamp;

/// The bounds of a time window, half-open: `[start, end)`.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Window {
    /// First instant in the window.
    pub start: Timestamp,
    /// First instant after the window.
    pub end: Timestamp,
}

impl Window {
    /// `[start, end)` in milliseconds.
    pub fn from_millis(start: i64, end: i64) -> Self {
        Window {
            start: Timestamp::from_millis(start),
            end: Timestamp::from_millis(end),
        }
    }

    /// Whether `time` lies in the window.
    pub fn contains(&self, time: Timestamp) -> bool {
        self.start <= time && time < self.end
    }
}

/// The bounds of a count window: the key's events numbered `first..end`
/// (from 0, in arrival order).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountWindow {
    /// Number of the window's first event.
    pub first: u64,
    /// Number of the first event after the window.
    pub end: u64,
}

/// Why a window result was emitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Firing {
    /// The window closed (its end was reached): the regular result.
    Final,
    /// An early result while the window is still open (by count or interval).
    Early,
    /// A late event within the allowed lateness changed a closed window: the
    /// result replaces the one emitted before.
    Update,
}

/// One result of one window of one key.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WindowResult<K, R, W = Window> {
    /// The key (`()` for a non-keyed window).
    pub key: K,
    /// The window's bounds.
    pub window: W,
    /// The window function's result.
    pub value: R,
    /// Why it was emitted.
    pub firing: Firing,
}

/// The events of one window as a full-window function sees them: possibly
/// in several parts (the slices of a sliding window), never copied.
#[derive(Clone, Copy, Debug)]
pub struct WindowContents<'a, T> {
    parts: &'a [&'a [T]],
}

impl<'a, T> WindowContents<'a, T> {
    /// Contents made of `parts`, in order.
    pub fn new(parts: &'a [&'a [T]]) -> Self {
        WindowContents { parts }
    }

    /// Every event, in arrival order within each slice and slices in time order.
    pub fn iter(&self) -> impl Iterator<Item = &'a T> + 'a {
        self.parts.iter().flat_map(|p| p.iter())
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    /// Whether the window holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
