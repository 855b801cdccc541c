//! `Windows`: building a window operator in one expression — its assigner,
//! time domain, allowed lateness, early firing, and window function.
//!
//! ```
//! use std::time::Duration;
//! use streamwork_window::Windows;
//! // Count per key in tumbling 10 s event-time windows, accepting events up to
//! // 5 s late (they re-fire their window as an update).
//! let counts = Windows::tumbling(Duration::from_secs(10))
//!     .allowed_lateness(Duration::from_secs(5))
//!     .count::<u64, u32>();
//! # let _ = counts;
//! ```

use std::marker::PhantomData;
use std::time::Duration;

use streamwork_core::{ByKey, Data, Key, NoKey};

use crate::LateCounter;
use crate::aggregate::{Aggregate, Apply, Count, MaxBy, Sum};
use crate::count::CountWindows;
use crate::domain::{EventDomain, ProcessingDomain};
use crate::session::SessionWindows;
use crate::sliced::SlicedWindows;
use crate::window::WindowContents;

/// Early firing of sliced windows, before they close.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Early {
    /// Every this many events of a key in a window.
    pub every: Option<u64>,
    /// Every this many milliseconds of processing time, for windows that changed.
    pub interval: Option<i64>,
}

/// Tumbling or sliding windows (computed on slices).
#[derive(Copy, Clone, Debug)]
pub struct Sliced {
    size: i64,
    slide: i64,
    early: Early,
}

/// Session windows, closed by a gap of inactivity.
#[derive(Copy, Clone, Debug)]
pub struct Session {
    gap: i64,
}

/// Count windows.
#[derive(Copy, Clone, Debug)]
pub struct Counted {
    size: u64,
    slide: u64,
}

/// Windows per key: the input must be a keyed stream.
#[derive(Copy, Clone, Debug, Default)]
pub struct PerKey;

/// One window for all records: any stream (usually at parallelism 1).
#[derive(Copy, Clone, Debug, Default)]
pub struct AllRecords;

/// A window operator being described: shape `S`, time domain `D`, key mode `M`.
#[derive(Clone, Debug)]
pub struct WindowSpec<S, D, M> {
    shape: S,
    lateness: i64,
    late: LateCounter,
    _types: PhantomData<fn(D, M)>,
}

/// Entry points: `Windows::tumbling(..)`, `sliding`, `session`, `count`,
/// `sliding_count`. Windows are per key unless [`all_records`](WindowSpec::all_records)
/// is called, and in event time unless [`processing_time`](WindowSpec::processing_time) is.
#[derive(Copy, Clone, Debug, Default)]
pub struct Windows;

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Windows {
    fn spec<S>(shape: S) -> WindowSpec<S, EventDomain, PerKey> {
        WindowSpec {
            shape,
            lateness: 0,
            late: LateCounter::default(),
            _types: PhantomData,
        }
    }

    /// Fixed windows of `size`, one after the other: `[k * size, (k + 1) * size)`.
    pub fn tumbling(size: Duration) -> WindowSpec<Sliced, EventDomain, PerKey> {
        Self::spec(Sliced {
            size: millis(size),
            slide: millis(size),
            early: Early::default(),
        })
    }

    /// Windows of `size` starting every `slide`: `[k * slide, k * slide + size)`.
    pub fn sliding(size: Duration, slide: Duration) -> WindowSpec<Sliced, EventDomain, PerKey> {
        Self::spec(Sliced {
            size: millis(size),
            slide: millis(slide),
            early: Early::default(),
        })
    }

    /// Sessions of a key: events closer than `gap` belong to one session
    /// `[first, last + gap)`; a new event bridging two sessions merges them.
    pub fn session(gap: Duration) -> WindowSpec<Session, EventDomain, PerKey> {
        Self::spec(Session { gap: millis(gap) })
    }

    /// Every `size` events of a key.
    pub fn count(size: u64) -> WindowSpec<Counted, EventDomain, PerKey> {
        Self::spec(Counted {
            size: size.max(1),
            slide: size.max(1),
        })
    }

    /// The last `size` events of a key, every `slide` events. `size` must be a
    /// multiple of `slide` (it is rounded up to one).
    pub fn sliding_count(size: u64, slide: u64) -> WindowSpec<Counted, EventDomain, PerKey> {
        let slide = slide.max(1);
        Self::spec(Counted {
            size: size.max(1).div_ceil(slide) * slide,
            slide,
        })
    }
}

impl<S, D, M> WindowSpec<S, D, M> {
    fn with<D2, M2>(self) -> WindowSpec<S, D2, M2> {
        WindowSpec {
            shape: self.shape,
            lateness: self.lateness,
            late: self.late,
            _types: PhantomData,
        }
    }

    /// One window for all records instead of one per key.
    pub fn all_records(self) -> WindowSpec<S, D, AllRecords> {
        self.with()
    }

    /// Events up to `lateness` behind the watermark still update their window,
    /// which re-fires as an [`Update`](crate::Firing::Update).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness = i64::try_from(lateness.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// Counts late events beyond the lateness into `counter` (shared with the caller).
    pub fn count_late_in(mut self, counter: LateCounter) -> Self {
        self.late = counter;
        self
    }
}

impl<M> WindowSpec<Sliced, EventDomain, M> {
    /// Windows by the wall clock at arrival instead of event time.
    pub fn processing_time(self) -> WindowSpec<Sliced, ProcessingDomain, M> {
        self.with()
    }
}

impl<M> WindowSpec<Session, EventDomain, M> {
    /// Sessions by the wall clock at arrival instead of event time.
    pub fn processing_time(self) -> WindowSpec<Session, ProcessingDomain, M> {
        self.with()
    }
}

impl<D, M> WindowSpec<Sliced, D, M> {
    /// Also fires a window early, as an [`Early`](crate::Firing::Early) result,
    /// every `n` events of a key in it.
    pub fn early_every(mut self, n: u64) -> Self {
        self.shape.early.every = Some(n.max(1));
        self
    }

    /// Also fires changed windows early every `interval` of processing time.
    pub fn early_interval(mut self, interval: Duration) -> Self {
        self.shape.early.interval = Some(millis(interval));
        self
    }
}

/// The convenience window functions, for every shape and key mode.
macro_rules! window_functions {
    ($($generics:ident),*; $key:ty; $op:ident<$($param:ty),*>) => {
        /// Counts the events of each window.
        pub fn count<T: Data, $($generics: Key),*>(self) -> $op<T, $key, $($param,)* Count> {
            self.aggregate(Count)
        }

        /// Sums `f(event)` over each window (wrapping).
        pub fn sum<T: Data, $($generics: Key,)* F: Fn(&T) -> u64 + Clone + Send + 'static>(
            self,
            f: F,
        ) -> $op<T, $key, $($param,)* Sum<F>> {
            self.aggregate(Sum(f))
        }

        /// The first event with the largest `f(event)` of each window.
        pub fn max_by<T: Data, $($generics: Key,)* V: Ord + Clone + Send + 'static, F: Fn(&T) -> V + Clone + Send + 'static>(
            self,
            f: F,
        ) -> $op<T, $key, $($param,)* MaxBy<F>> {
            self.aggregate(MaxBy(f))
        }

        /// A full-window function over each window's buffered events.
        pub fn apply<T: Data, $($generics: Key,)* R: Data, F: Fn(WindowContents<'_, T>) -> R + Clone + Send + 'static>(
            self,
            f: F,
        ) -> $op<T, $key, $($param,)* Apply<T, F>> {
            self.aggregate(Apply::new(f))
        }
    };
}

impl<D: crate::Domain> WindowSpec<Sliced, D, PerKey> {
    /// Computes `aggregate` per key and window.
    pub fn aggregate<T: Data, K: Key, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SlicedWindows<T, ByKey<K>, D, A> {
        SlicedWindows::new(
            self.shape.size,
            self.shape.slide,
            self.lateness,
            self.shape.early,
            aggregate,
            self.late,
        )
    }
    window_functions!(K; ByKey<K>; SlicedWindows<D>);
}

impl<D: crate::Domain> WindowSpec<Sliced, D, AllRecords> {
    /// Computes `aggregate` per window over all records.
    pub fn aggregate<T: Data, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SlicedWindows<T, NoKey, D, A> {
        SlicedWindows::new(
            self.shape.size,
            self.shape.slide,
            self.lateness,
            self.shape.early,
            aggregate,
            self.late,
        )
    }
    window_functions!(; NoKey; SlicedWindows<D>);
}

impl<D: crate::Domain> WindowSpec<Session, D, PerKey> {
    /// Computes `aggregate` per key and session.
    pub fn aggregate<T: Data, K: Key, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SessionWindows<T, ByKey<K>, D, A> {
        SessionWindows::new(self.shape.gap, self.lateness, aggregate, self.late)
    }
    window_functions!(K; ByKey<K>; SessionWindows<D>);
}

impl<D: crate::Domain> WindowSpec<Session, D, AllRecords> {
    /// Computes `aggregate` per session over all records.
    pub fn aggregate<T: Data, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SessionWindows<T, NoKey, D, A> {
        SessionWindows::new(self.shape.gap, self.lateness, aggregate, self.late)
    }
    window_functions!(; NoKey; SessionWindows<D>);
}

impl<D> WindowSpec<Counted, D, PerKey> {
    /// Computes `aggregate` per key over each count window.
    pub fn aggregate<T: Data, K: Key, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> CountWindows<T, ByKey<K>, A> {
        CountWindows::new(self.shape.size, self.shape.slide, aggregate)
    }
    window_functions!(K; ByKey<K>; CountWindows<>);
}

impl<D> WindowSpec<Counted, D, AllRecords> {
    /// Computes `aggregate` over each count window of all records.
    pub fn aggregate<T: Data, A: Aggregate<T>>(self, aggregate: A) -> CountWindows<T, NoKey, A> {
        CountWindows::new(self.shape.size, self.shape.slide, aggregate)
    }
    window_functions!(; NoKey; CountWindows<>);
}
