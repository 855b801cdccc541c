//! `Windows`: building a window operator in one expression — its assigner,
//! time domain, allowed lateness, early firing, and window function.
//!
//! ```
//! use std::time::Duration;
//! use streamwork::window::Windows;
//! // Count per key in tumbling 10 s event-time windows, accepting events up to
//! // 5 s late (they re-fire their window as an update).
//! let counts = Windows::tumbling(Duration::from_secs(10))
//!     .allowed_lateness(Duration::from_secs(5))
//!     .count::<u64, u32>();
//! # let _ = counts;
//! ```

use std::marker::PhantomData;
use std::time::Duration;

use streamwork_core::{ByKey, Data, Key, KeyKind, NoKey};
use streamwork_state::StateData;

use crate::LateCounter;
use crate::aggregate::{Aggregate, Apply, Count, MaxBy, Sum};
use crate::count::CountWindows;
use crate::domain::{EventDomain, ProcessingDomain};
use crate::session::SessionWindows;
pub use crate::sliced::Early;
use crate::sliced::SlicedWindows;
use crate::window::WindowContents;

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

/// Windows whose state goes into the job's checkpoints (the default): by
/// key group, so that a restore at any parallelism takes each key's
/// windows. Their keys, accumulators and buffered events must be
/// archivable ([`StateData`]: primitives, `String`, `Vec`, tuples, and
/// types deriving rkyv's traits).
#[derive(Copy, Clone, Debug, Default)]
pub struct Durable;

/// Windows left out of checkpoints ([`WindowSpec::transient`]), for types
/// that cannot be archived: a job that promises more than at-most-once, or
/// a run with checkpoints, refuses them, naming the fix.
#[derive(Copy, Clone, Debug, Default)]
pub struct Transient;

/// A window operator being described: shape `S`, time domain `D`, key mode
/// `M`, and whether its state is checkpointed (`C`: [`Durable`], the
/// default, or [`Transient`]).
#[derive(Clone, Debug)]
pub struct WindowSpec<S, D, M, C = Durable> {
    shape: S,
    lateness: i64,
    late: LateCounter,
    _types: PhantomData<fn(D, M, C)>,
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

impl<S, D, M> WindowSpec<S, D, M, Durable> {
    /// Leaves the windows' state out of checkpoints, for key, accumulator
    /// or event types that cannot be archived. A job promising more than
    /// at-most-once, or a run with checkpoints, refuses such windows.
    pub fn transient(self) -> WindowSpec<S, D, M, Transient> {
        self.with()
    }
}

impl<S, D, M, C> WindowSpec<S, D, M, C> {
    fn with<D2, M2, C2>(self) -> WindowSpec<S, D2, M2, C2> {
        WindowSpec {
            shape: self.shape,
            lateness: self.lateness,
            late: self.late,
            _types: PhantomData,
        }
    }

    /// One window for all records instead of one per key.
    pub fn all_records(self) -> WindowSpec<S, D, AllRecords, C> {
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

impl<M, C> WindowSpec<Sliced, EventDomain, M, C> {
    /// Windows by the wall clock at arrival instead of event time.
    pub fn processing_time(self) -> WindowSpec<Sliced, ProcessingDomain, M, C> {
        self.with()
    }
}

impl<M, C> WindowSpec<Session, EventDomain, M, C> {
    /// Sessions by the wall clock at arrival instead of event time.
    pub fn processing_time(self) -> WindowSpec<Session, ProcessingDomain, M, C> {
        self.with()
    }
}

impl<D, M, C> WindowSpec<Sliced, D, M, C> {
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

/// The window functions of one shape and key mode, checkpointed or not:
/// `aggregate` builds the operator (for a checkpointed spec, only from
/// archivable keys and accumulators, with its checkpointing on); `count`,
/// `sum`, `max_by` and `apply` are `aggregate` with a given aggregate.
macro_rules! window_functions {
    (
        $spec:ty, [$($d:ident: $dbound:path)?], [$($kgen:ident)?], $key:ty, $op:ident;
        $make:ident; $mode:ident
    ) => {
        impl<$($d: $dbound)?> $spec {
            window_functions!(@aggregate $mode, [$($kgen)?], $key, $op, $make);
            window_functions!(@fn $mode, count, [$($kgen)?], $key, $op, [], (), Count, Count, [], []);
            window_functions!(
                @fn $mode, sum, [$($kgen)?], $key, $op,
                [F: Fn(&T) -> u64 + Clone + Send + 'static], (f: F), Sum<F>, Sum(f), [], []
            );
            window_functions!(
                @fn $mode, max_by, [$($kgen)?], $key, $op,
                [V: Ord + Clone + Send + Sync + 'static, F: Fn(&T) -> V + Clone + Send + 'static],
                (f: F), MaxBy<F>, MaxBy(f), [T: StateData, V: StateData], [T: Sync,]
            );
            window_functions!(
                @fn $mode, apply, [$($kgen)?], $key, $op,
                [R: Data, F: Fn(WindowContents<'_, T>) -> R + Clone + Send + 'static],
                (f: F), Apply<T, F>, Apply::new(f), [T: StateData], [T: Sync,]
            );
        }
    };
    (@op SlicedWindows, $t:ty, $key:ty, $agg:ty) => { SlicedWindows<$t, $key, D, $agg> };
    (@op SessionWindows, $t:ty, $key:ty, $agg:ty) => { SessionWindows<$t, $key, D, $agg> };
    (@op CountWindows, $t:ty, $key:ty, $agg:ty) => { CountWindows<$t, $key, $agg> };
    (@doc count) => { "Counts the events of each window." };
    (@doc sum) => { "Sums `f(event)` over each window (wrapping)." };
    (@doc max_by) => { "The first event with the largest `f(event)` of each window." };
    (@doc apply) => { "A full-window function over each window's buffered events." };
    (
        @fn durable, $name:ident, [$($kgen:ident)?], $key:ty, $op:ident,
        [$($g:tt)*], ($($arg:ident: $argty:ty)?), $agg:ty, $make:expr, [$($b:tt)*], [$($s:tt)*]
    ) => {
        #[doc = window_functions!(@doc $name)]
        #[allow(clippy::multiple_bound_locations)] // what checkpointing adds, apart
        pub fn $name<T: Data $(, $kgen: Key + StateData)?, $($g)*>(self $(, $arg: $argty)?) -> window_functions!(@op $op, T, $key, $agg)
        where
            $($s)* $($b)*
        {
            self.aggregate($make)
        }
    };
    (
        @fn transient, $name:ident, [$($kgen:ident)?], $key:ty, $op:ident,
        [$($g:tt)*], ($($arg:ident: $argty:ty)?), $agg:ty, $make:expr, [$($b:tt)*], [$($s:tt)*]
    ) => {
        #[doc = window_functions!(@doc $name)]
        #[allow(clippy::multiple_bound_locations)] // what sharing with a checkpoint adds, apart
        pub fn $name<T: Data $(, $kgen: Key)?, $($g)*>(self $(, $arg: $argty)?) -> window_functions!(@op $op, T, $key, $agg)
        where
            $($s)*
        {
            self.aggregate($make)
        }
    };
    (@aggregate durable, [$($kgen:ident)?], $key:ty, $op:ident, $make:ident) => {
        /// Computes `aggregate` in each window; its state goes into the
        /// job's checkpoints, by key group.
        pub fn aggregate<T: Data $(, $kgen: Key + StateData)?, A: Aggregate<T>>(
            self,
            aggregate: A,
        ) -> window_functions!(@op $op, T, $key, A)
        where
            A::Acc: StateData,
        {
            self.$make(aggregate).checkpointed()
        }
    };
    (@aggregate transient, [$($kgen:ident)?], $key:ty, $op:ident, $make:ident) => {
        /// Computes `aggregate` in each window; its state is left out of
        /// checkpoints.
        pub fn aggregate<T: Data $(, $kgen: Key)?, A: Aggregate<T>>(
            self,
            aggregate: A,
        ) -> window_functions!(@op $op, T, $key, A) {
            self.$make(aggregate)
        }
    };
}

impl<D: crate::Domain, M, C> WindowSpec<Sliced, D, M, C> {
    fn make_sliced<T: Data, KK: KeyKind, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SlicedWindows<T, KK, D, A> {
        SlicedWindows::new(
            self.shape.size,
            self.shape.slide,
            self.lateness,
            self.shape.early,
            aggregate,
            self.late,
        )
    }
}

impl<D: crate::Domain, M, C> WindowSpec<Session, D, M, C> {
    fn make_session<T: Data, KK: KeyKind, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> SessionWindows<T, KK, D, A> {
        SessionWindows::new(self.shape.gap, self.lateness, aggregate, self.late)
    }
}

impl<D, M, C> WindowSpec<Counted, D, M, C> {
    fn make_counted<T: Data, KK: KeyKind, A: Aggregate<T>>(
        self,
        aggregate: A,
    ) -> CountWindows<T, KK, A> {
        CountWindows::new(self.shape.size, self.shape.slide, aggregate)
    }
}

window_functions!(WindowSpec<Sliced, D, PerKey, Durable>, [D: crate::Domain], [K], ByKey<K>, SlicedWindows; make_sliced; durable);
window_functions!(WindowSpec<Sliced, D, PerKey, Transient>, [D: crate::Domain], [K], ByKey<K>, SlicedWindows; make_sliced; transient);
window_functions!(WindowSpec<Sliced, D, AllRecords, Durable>, [D: crate::Domain], [], NoKey, SlicedWindows; make_sliced; durable);
window_functions!(WindowSpec<Sliced, D, AllRecords, Transient>, [D: crate::Domain], [], NoKey, SlicedWindows; make_sliced; transient);
window_functions!(WindowSpec<Session, D, PerKey, Durable>, [D: crate::Domain], [K], ByKey<K>, SessionWindows; make_session; durable);
window_functions!(WindowSpec<Session, D, PerKey, Transient>, [D: crate::Domain], [K], ByKey<K>, SessionWindows; make_session; transient);
window_functions!(WindowSpec<Session, D, AllRecords, Durable>, [D: crate::Domain], [], NoKey, SessionWindows; make_session; durable);
window_functions!(WindowSpec<Session, D, AllRecords, Transient>, [D: crate::Domain], [], NoKey, SessionWindows; make_session; transient);
window_functions!(WindowSpec<Counted, D, PerKey, Durable>, [D: Sized], [K], ByKey<K>, CountWindows; make_counted; durable);
window_functions!(WindowSpec<Counted, D, PerKey, Transient>, [D: Sized], [K], ByKey<K>, CountWindows; make_counted; transient);
window_functions!(WindowSpec<Counted, D, AllRecords, Durable>, [D: Sized], [], NoKey, CountWindows; make_counted; durable);
window_functions!(WindowSpec<Counted, D, AllRecords, Transient>, [D: Sized], [], NoKey, CountWindows; make_counted; transient);
