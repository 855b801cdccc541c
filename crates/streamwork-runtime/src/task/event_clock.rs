//! The event time of an instance: the minimum watermark over every sender
//! of every port that is neither idle nor ended; the end of time once every
//! sender has ended or is idle with one ended.

use streamwork_core::Timestamp;

use crate::message::SenderIdx;

/// Event time as seen from one sender into one port.
#[derive(Copy, Clone, Debug)]
struct SenderTime {
    watermark: Timestamp,
    idle: bool,
    ended: bool,
}

/// The event time of an instance: the minimum watermark over every sender of
/// every port that is neither idle nor ended (an ended sender counts as the
/// end of time). It never goes back.
pub(crate) struct EventClock {
    senders: Vec<Vec<SenderTime>>,
    current: Timestamp,
    all_idle: bool,
}

/// What changed when a sender's time changed.
pub(crate) enum Change {
    None,
    Advanced(Timestamp),
    BecameIdle,
}

impl EventClock {
    pub(crate) fn new(senders_per_port: &[u32]) -> Self {
        let initial = SenderTime {
            watermark: Timestamp::MIN,
            idle: false,
            ended: false,
        };
        EventClock {
            senders: senders_per_port
                .iter()
                .map(|&n| vec![initial; n as usize])
                .collect(),
            current: Timestamp::MIN,
            all_idle: false,
        }
    }

    fn sender(&mut self, port: usize, from: SenderIdx) -> Option<&mut SenderTime> {
        self.senders.get_mut(port)?.get_mut(from.0 as usize)
    }

    /// Records data from a sender: an idle sender becomes active again.
    pub(crate) fn activity(&mut self, port: usize, from: SenderIdx) -> Change {
        match self.sender(port, from) {
            Some(sender) if sender.idle => {
                sender.idle = false;
                self.recompute()
            }
            _ => Change::None,
        }
    }

    pub(crate) fn watermark(
        &mut self,
        port: usize,
        from: SenderIdx,
        watermark: Timestamp,
    ) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.idle = false;
            sender.watermark = sender.watermark.max(watermark);
        }
        self.recompute()
    }

    pub(crate) fn idle(&mut self, port: usize, from: SenderIdx) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.idle = true;
        }
        self.recompute()
    }

    pub(crate) fn ended(&mut self, port: usize, from: SenderIdx) -> Change {
        if let Some(sender) = self.sender(port, from) {
            sender.ended = true;
            sender.watermark = Timestamp::MAX;
        }
        self.recompute()
    }

    fn recompute(&mut self) -> Change {
        let active = self
            .senders
            .iter()
            .flatten()
            .filter(|s| !s.idle && !s.ended);
        let minimum = active.map(|s| s.watermark).min();
        let any_ended = self.senders.iter().flatten().any(|s| s.ended);
        let (minimum, all_idle) = match minimum {
            Some(minimum) => (minimum, false),
            // Every sender has ended, or the others are idle: nothing holds
            // event time back (an idle sender is skipped, as it was while the
            // ended ones were active and ahead), so it ends, as Flink's does.
            // What an idle sender sends later is late.
            None if any_ended => (Timestamp::MAX, false),
            None => (self.current, true),
        };
        let became_idle = all_idle && !self.all_idle;
        self.all_idle = all_idle;
        if minimum > self.current {
            self.current = minimum;
            Change::Advanced(minimum)
        } else if became_idle {
            Change::BecameIdle
        } else {
            Change::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn advanced(change: Change) -> Option<i64> {
        match change {
            Change::Advanced(w) => Some(w.millis()),
            _ => None,
        }
    }

    #[test]
    fn event_time_is_the_minimum_over_ports_and_senders() {
        let mut clock = EventClock::new(&[2, 1]);
        assert_eq!(advanced(clock.watermark(0, SenderIdx(0), t(10))), None);
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(5))), None);
        assert_eq!(advanced(clock.watermark(1, SenderIdx(0), t(7))), Some(5));
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(20))), Some(7));
        // Never goes back, even if a sender reports an older watermark.
        assert_eq!(advanced(clock.watermark(1, SenderIdx(0), t(1))), None);
        assert_eq!(clock.current, t(7));
    }

    #[test]
    fn idle_senders_are_skipped_until_they_speak_again() {
        let mut clock = EventClock::new(&[2]);
        clock.watermark(0, SenderIdx(0), t(10));
        assert_eq!(advanced(clock.idle(0, SenderIdx(1))), Some(10));
        assert!(matches!(clock.idle(0, SenderIdx(0)), Change::BecameIdle));
        // Data from an idle sender makes it active; the clock does not go back.
        assert!(matches!(clock.activity(0, SenderIdx(1)), Change::None));
        assert_eq!(advanced(clock.watermark(0, SenderIdx(1), t(15))), Some(15));
    }

    #[test]
    fn an_ended_sender_counts_as_the_end_of_time() {
        let mut clock = EventClock::new(&[2]);
        clock.watermark(0, SenderIdx(0), t(3));
        assert_eq!(advanced(clock.ended(0, SenderIdx(1))), Some(3));
        assert_eq!(advanced(clock.ended(0, SenderIdx(0))), Some(i64::MAX));
    }

    /// A quiet input whose sibling has ended does not hold the sibling's
    /// last windows back until the quiet one ends: event time ends.
    #[test]
    fn an_idle_sender_beside_an_ended_one_holds_nothing_back() {
        let mut clock = EventClock::new(&[1, 1]);
        clock.watermark(0, SenderIdx(0), t(3));
        assert_eq!(advanced(clock.watermark(1, SenderIdx(0), t(8))), Some(3));
        assert_eq!(advanced(clock.idle(0, SenderIdx(0))), Some(8));
        assert_eq!(advanced(clock.ended(1, SenderIdx(0))), Some(i64::MAX));
        // Ended before the other went idle: the same.
        let mut clock = EventClock::new(&[2]);
        clock.watermark(0, SenderIdx(0), t(3));
        assert_eq!(advanced(clock.ended(0, SenderIdx(1))), Some(3));
        assert_eq!(advanced(clock.idle(0, SenderIdx(0))), Some(i64::MAX));
        // Idle alone, with nothing ended: event time waits.
        let mut clock = EventClock::new(&[1]);
        clock.watermark(0, SenderIdx(0), t(3));
        assert!(matches!(clock.idle(0, SenderIdx(0)), Change::BecameIdle));
    }
}
