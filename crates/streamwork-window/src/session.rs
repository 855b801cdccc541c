//! Session windows: per key, events closer than a gap belong to one session
//! `[first event, last event + gap)`; an event that bridges two sessions
//! merges them (and their aggregates). Built on [`Timers`]: each session end
//! is a timer of its key.

use std::marker::PhantomData;

use streamwork_core::SnapshotContext;
use streamwork_core::timer::Timers;
use streamwork_core::{
    Context, Data, KeyKind, Operator, Restore, StateBytes, TaskError, Timestamp,
};
use streamwork_state::{CowMap, KeyedCheckpoint};

use crate::LateCounter;
use crate::aggregate::Aggregate;
use crate::domain::Domain;
use crate::ends::last_instant;
use crate::outputs::WindowOutputs;
use crate::window::{Firing, Window, WindowResult};

#[derive(Clone)]
struct Session<Acc> {
    start: i64,
    end: i64,
    acc: Acc,
    fired: bool,
}

/// How session windows checkpoint: the time reached, and per key its
/// sessions as `(start, end, accumulator, fired)`.
pub type SessionCheckpoint<K, Acc> = KeyedCheckpoint<i64, K, Vec<(i64, i64, Acc, bool)>>;

/// Session windows over a stream partitioned as `KK`; see the module docs.
pub struct SessionWindows<T, KK: KeyKind, D, A: Aggregate<T>> {
    gap: i64,
    lateness: i64,
    aggregate: A,
    late: LateCounter,
    /// Each key's sessions, by start; frozen (copy-on-write) for a
    /// checkpoint.
    keys: CowMap<KK::Value, Vec<Session<A::Acc>>>,
    timers: Timers<(u64, KK::Value)>,
    now: i64,
    /// Its checkpointing: on, unless built `.transient()`.
    checkpoint: SessionCheckpoint<KK::Value, A::Acc>,
    _types: PhantomData<fn(T, D)>,
}

impl<T, KK: KeyKind, D, A: Aggregate<T>> Clone for SessionWindows<T, KK, D, A> {
    fn clone(&self) -> Self {
        SessionWindows {
            gap: self.gap,
            lateness: self.lateness,
            aggregate: self.aggregate.clone(),
            late: self.late.clone(),
            keys: self.keys.clone(),
            timers: self.timers.clone(),
            now: self.now,
            checkpoint: self.checkpoint.clone(),
            _types: PhantomData,
        }
    }
}

type Out<KK, A, T> =
    WindowOutputs<WindowResult<<KK as KeyKind>::Value, <A as Aggregate<T>>::Out>, T>;

impl<T: Data, KK: KeyKind, D: Domain, A: Aggregate<T>> SessionWindows<T, KK, D, A> {
    pub(crate) fn new(gap: i64, lateness: i64, aggregate: A, late: LateCounter) -> Self {
        SessionWindows {
            gap: gap.max(1),
            lateness: lateness.max(0),
            aggregate,
            late,
            keys: CowMap::new(),
            timers: Timers::new(),
            now: i64::MIN,
            checkpoint: KeyedCheckpoint::default(),
            _types: PhantomData,
        }
    }

    streamwork_state::keyed_checkpointed_builder! {
        /// Puts the open sessions (and those kept for lateness) and the time
        /// reached in the job's checkpoints, by key group; their timers are
        /// registered again on restore. Needed in a job that promises
        /// at-least-once or exactly-once delivery.
        where [KK::Value, A::Acc]
    }

    /// Registers the timer that next concerns `session` of key `hash`/`key`.
    fn wake(&mut self, hash: u64, key: &KK::Value, session_end: i64, fired: bool) {
        let wake = wake_time(session_end, fired, self.lateness);
        self.timers
            .register_event(Timestamp::from_millis(wake), (hash, key.clone()));
    }

    fn emit(
        aggregate: &A,
        key: &KK::Value,
        session: &Session<A::Acc>,
        firing: Firing,
        out: &mut Out<KK, A, T>,
    ) {
        let value = aggregate.result(&session.acc);
        let window = Window::from_millis(session.start, session.end);
        out.results.emit_at(
            WindowResult {
                key: key.clone(),
                window,
                value,
                firing,
            },
            Timestamp::from_millis(last_instant(session.end)),
        );
    }

    /// Fires the sessions that ended by `now` and forgets those past the
    /// lateness (with `None`, a domain in which this hook tells no time:
    /// nothing).
    fn advance(&mut self, now: Option<i64>, out: &mut Out<KK, A, T>) {
        let Some(now) = now else { return };
        self.now = self.now.max(now);
        let due: Vec<(u64, KK::Value)> = self
            .timers
            .fire_event(Timestamp::from_millis(now))
            .map(|(_, key)| key)
            .collect();
        for (hash, key) in due {
            let Some(sessions) = self.keys.get_mut(hash, &key) else {
                continue;
            };
            for session in sessions.iter_mut().filter(|s| !s.fired && s.end <= now) {
                session.fired = true;
                Self::emit(&self.aggregate, &key, session, Firing::Final, out);
            }
            let horizon = now.saturating_sub(self.lateness);
            sessions.retain(|s| !(s.fired && s.end <= horizon));
            let wakes: Vec<(i64, bool)> = sessions.iter().map(|s| (s.end, s.fired)).collect();
            if wakes.is_empty() {
                self.keys.remove(hash, &key);
            }
            for (end, fired) in wakes {
                self.wake(hash, &key, end, fired);
            }
        }
    }
}

/// When the timer of a session that ends at `end` is due: at its end, or,
/// once fired, when the lateness after it has passed and it is forgotten.
fn wake_time(end: i64, fired: bool, lateness: i64) -> i64 {
    if fired {
        end.saturating_add(lateness)
    } else {
        end
    }
}

impl<T: Data, KK: KeyKind, D: Domain, A: Aggregate<T>> Operator for SessionWindows<T, KK, D, A> {
    type In = T;
    type Key = KK;
    type Out = WindowOutputs<WindowResult<KK::Value, A::Out>, T>;
    type Time = D::Time;

    streamwork_state::keyed_checkpoint_hooks!(crate::TRANSIENT_FIX);

    fn on_record(&mut self, value: T, ctx: &mut Context<'_, KK, Self::Out>) {
        let t = D::record_time(ctx.timestamp(), &mut self.now);
        let key = ctx.key_ref();
        let (hash, key_value) = (KK::hash(key), KK::value(key));
        let sessions = self.keys.get_or_insert_with(hash, key_value, Vec::new);
        // The new event's session, merged with every session it overlaps.
        let (mut start, mut end) = (t, t.saturating_add(self.gap));
        let mut acc = self.aggregate.create();
        self.aggregate.add(&mut acc, &value);
        let mut fired = false;
        let overlapping: Vec<usize> = (0..sessions.len())
            .filter(|&i| {
                // Half-open intervals overlap; one clipped at the end of
                // time includes that instant.
                let s = &sessions[i];
                s.start <= last_instant(end) && start <= last_instant(s.end)
            })
            .collect();
        for &i in &overlapping {
            let s = &sessions[i];
            start = start.min(s.start);
            end = end.max(s.end);
            fired |= s.fired;
        }
        if D::EVENT_TIME && end <= self.now && end.saturating_add(self.lateness) <= self.now {
            // Its session closed longer ago than the allowed lateness.
            if sessions.is_empty() {
                self.keys.remove(hash, key_value);
            }
            self.late.add(1);
            ctx.out().late.emit(value);
            return;
        }
        // A timer is a time and a key: one that a session of the key not
        // merged away still waits for is kept (deleting it lost that
        // session's firing or its cleanup). `overlapping` is in order.
        for &i in &overlapping {
            let wake = wake_time(sessions[i].end, sessions[i].fired, self.lateness);
            let shared = sessions.iter().enumerate().any(|(j, s)| {
                overlapping.binary_search(&j).is_err()
                    && wake_time(s.end, s.fired, self.lateness) == wake
            });
            if !shared {
                self.timers
                    .delete_event(Timestamp::from_millis(wake), &(hash, key_value.clone()));
            }
        }
        for &i in overlapping.iter().rev() {
            let s = sessions.remove(i);
            self.aggregate.merge(&mut acc, &s.acc);
        }
        // A merged session that ends ahead of the time reached is a window
        // not emitted yet, whatever its parts were: it fires at its end.
        let mut session = Session {
            start,
            end,
            acc,
            fired: false,
        };
        if D::EVENT_TIME && end <= self.now {
            // Late, within the lateness: the session fires at once, as an
            // update if part of it fired before.
            let firing = if fired { Firing::Update } else { Firing::Final };
            session.fired = true;
            Self::emit(&self.aggregate, key_value, &session, firing, ctx.out());
            let cleanup = end.saturating_add(self.lateness);
            self.timers
                .register_event(Timestamp::from_millis(cleanup), (hash, key_value.clone()));
        } else {
            self.timers
                .register_event(Timestamp::from_millis(end), (hash, key_value.clone()));
        }
        let position = sessions.partition_point(|s| s.start < session.start);
        sessions.insert(position, session);
    }

    crate::window_time_hooks!();

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Self::Out) {
        self.advance(D::tick_time(now), out);
    }

    fn snapshot(&mut self, ctx: &SnapshotContext) -> Result<Option<StateBytes>, TaskError> {
        if !self.checkpoint.is_enabled() {
            return Ok(None);
        }
        // The pause: the sessions are frozen; they (or those that changed
        // since a complete checkpoint of this run) are gathered and
        // archived off this thread, when the checkpoint is written.
        self.checkpoint
            .snapshot_map(ctx, self.now, &mut self.keys, |sessions| {
                sessions
                    .iter()
                    .map(|s| (s.start, s.end, s.acc.clone(), s.fired))
                    .collect()
            })
    }

    fn restore(&mut self, restore: &Restore<'_>) -> Result<(), TaskError> {
        let Some(entries) = self.checkpoint.restore_raising(restore, &mut self.now)? else {
            return Ok(());
        };
        for (key, sessions) in entries {
            let hash = KK::hash_value(&key);
            for &(_, end, _, fired) in &sessions {
                self.wake(hash, &key, end, fired);
            }
            let sessions = sessions
                .into_iter()
                .map(|(start, end, acc, fired)| Session {
                    start,
                    end,
                    acc,
                    fired,
                })
                .collect();
            self.keys.insert(hash, key, sessions);
        }
        Ok(())
    }
}
