//! The door: everything an arriving call is decided on, and [`Door::admit`], the one
//! function that decides it.
//!
//! The machine derives its door from its state after every change ([`Machine::door`]);
//! the layer publishes a copy that calls read without the machine's lock. Both decide a
//! call with the same [`Door::admit`]: a call decided without the lock is decided by the
//! machine's own rule on the machine's own state, as it stood when the call read it.
//! When the decision changes the state (a probe, a half-open past its dwell limit), the
//! machine makes it, under its lock, with the same function on its current door.
//!
//! [`Machine::door`]: super::Machine::door

use std::time::Instant;

use super::state::{NextProbe, Reason, Skip, State};
use super::Mode;

/// Generation and mode in one number. A call admitted in one epoch counts only while the
/// breaker is still in it: every change of state or of mode starts a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Epoch(u64);

impl Epoch {
    /// Bits an epoch may use: it is packed with flags into one word in places.
    pub(crate) const BITS: u32 = 56;

    pub(crate) fn new(generation: u64, mode: Mode) -> Epoch {
        let mode = match mode {
            Mode::Enabled => 0,
            Mode::ObserveOnly => 1,
            Mode::Disabled => 2,
        };
        Epoch((generation << 2 | mode) & ((1 << Self::BITS) - 1))
    }

    pub(crate) fn from_bits(bits: u64) -> Epoch {
        Epoch(bits & ((1 << Self::BITS) - 1))
    }

    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    pub(crate) fn mode(self) -> Mode {
        match self.0 & 3 {
            0 => Mode::Enabled,
            1 => Mode::ObserveOnly,
            _ => Mode::Disabled,
        }
    }
}

/// When an open breaker lets its probe through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Never by itself: only a person (a reset) ends it.
    Never,
    /// Once the cooldown's count of calls reaches `step` and the clock reaches `time`
    /// (whichever are set; neither: the next call).
    At {
        step: Option<u64>,
        time: Option<Instant>,
    },
}

impl Due {
    /// Whether the wait is counted in calls: then every arriving call takes a step.
    fn counts_calls(self) -> bool {
        matches!(self, Due::At { step: Some(_), .. })
    }

    /// For a call arriving now: `None` if the probe may go, else what to tell a call
    /// that must wait. Takes the call's step when the wait is counted in calls, and reads
    /// the clock only when it is counted in time.
    fn wait(self, clock: &mut impl Clock) -> Option<NextProbe> {
        let Due::At { step, time } = self else {
            return Some(NextProbe::Manual);
        };
        let calls = step.map(|due| due.saturating_sub(clock.step()));
        let at = time.filter(|&due| clock.now() < due);
        match (calls, at) {
            (None | Some(0), None) => None,
            (calls, at) => Some(NextProbe::After {
                calls: calls.unwrap_or(1).max(1),
                at,
            }),
        }
    }

    /// What a caller asking now, without calling, is told, `step` calls having been
    /// counted: the same as a call skipped at that step is told.
    pub(crate) fn next_probe(self, step: u64, now: Instant) -> NextProbe {
        let mut clock = Fixed { step, now };
        self.wait(&mut clock)
            .unwrap_or(NextProbe::After { calls: 1, at: None })
    }
}

/// What a call may be told without the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Calls go through. `quiet`: a success changes nothing but the counts (no failure
    /// counted, consecutive failures the policy, no slow-call rule).
    Closed { quiet: bool },
    /// Calls are skipped until `due`; then the next one is the probe. `forced`: a
    /// person opened it.
    Open { due: Due, forced: bool },
    /// Probes go while a slot is `free`; everyone else is skipped. At `until` (the dwell
    /// limit) the breaker re-opens.
    HalfOpen { free: bool, until: Option<Instant> },
}

/// Everything an arriving call is decided on. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Door {
    pub(crate) epoch: Epoch,
    pub(crate) entry: Entry,
}

/// What [`Door::admit`] decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Closed: make the call.
    Call,
    /// Disabled: make the call and record nothing.
    Pass,
    /// Observe-only: make the call, which an enabled breaker would skip for this reason.
    Shadow(Reason),
    /// Do not make the call.
    Skip(Skip),
    /// The call is a probe: it takes a slot, and turns an open breaker half-open. Only
    /// the machine can grant it.
    Probe,
    /// Half-open outlived its dwell limit: the machine re-opens it, then decides.
    Expired,
}

impl Verdict {
    /// Whether only the machine can carry it out, because it changes the state.
    pub(crate) fn needs_machine(&self) -> bool {
        matches!(self, Verdict::Probe | Verdict::Expired)
    }
}

/// The two clocks a call is decided on, read only when the decision needs them.
pub(crate) trait Clock {
    /// This call's step on the count of calls an open breaker waits for. The first call
    /// takes the step; later calls return the same one.
    fn step(&mut self) -> u64;
    /// The calls counted so far, without taking a step.
    fn counted(&mut self) -> u64;
    /// The time now. The first call reads the clock; later calls return the same time.
    fn now(&mut self) -> Instant;
}

/// A clock that has already been read: for a call, its step; for anything else, the
/// calls counted so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub(crate) step: u64,
    pub(crate) now: Instant,
}

impl Clock for Fixed {
    fn step(&mut self) -> u64 {
        self.step
    }

    fn counted(&mut self) -> u64 {
        self.step
    }

    fn now(&mut self) -> Instant {
        self.now
    }
}

impl Door {
    /// The state a call finds.
    pub(crate) fn state(&self) -> State {
        match self.entry {
            Entry::Closed { .. } => State::Closed,
            Entry::Open { forced: true, .. } => State::ForcedOpen,
            Entry::Open { .. } => State::Open,
            Entry::HalfOpen { .. } => State::HalfOpen,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.epoch.mode()
    }

    /// Whether a success of a call admitted in `epoch` would change nothing but the
    /// counts.
    pub(crate) fn quiet_in(&self, epoch: Epoch) -> bool {
        self.epoch == epoch && matches!(self.entry, Entry::Closed { quiet: true })
    }

    /// Decides one arriving call. The kill switch skips every call, in every mode, and
    /// changes nothing else; in an open breaker whose cooldown counts calls, a killed
    /// call still takes its step.
    pub(crate) fn admit(&self, killed: bool, clock: &mut impl Clock) -> Verdict {
        let skip = |reason, next_probe| {
            Verdict::Skip(Skip {
                reason,
                state: self.state(),
                next_probe,
            })
        };
        let mode = self.mode();
        if mode == Mode::Disabled {
            return if killed {
                skip(Reason::Killed, NextProbe::Manual)
            } else {
                Verdict::Pass
            };
        }
        let verdict = match self.entry {
            Entry::Open { due, .. } if killed => {
                if due.counts_calls() {
                    clock.step();
                }
                return skip(Reason::Killed, NextProbe::Manual);
            }
            _ if killed => return skip(Reason::Killed, NextProbe::Manual),
            Entry::Closed { .. } => return Verdict::Call,
            Entry::Open { due, forced } => match due.wait(clock) {
                None => return Verdict::Probe,
                Some(next) if forced => skip(Reason::ForcedOpen, next),
                Some(next) => skip(Reason::Open, next),
            },
            Entry::HalfOpen {
                until: Some(until), ..
            } if clock.now() >= until => return Verdict::Expired,
            Entry::HalfOpen { free: true, .. } => return Verdict::Probe,
            Entry::HalfOpen { free: false, .. } => skip(Reason::HalfOpenFull, NextProbe::InFlight),
        };
        match verdict {
            Verdict::Skip(skip) if mode == Mode::ObserveOnly => Verdict::Shadow(skip.reason),
            verdict => verdict,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn door(entry: Entry) -> Door {
        Door {
            epoch: Epoch::new(7, Mode::Enabled),
            entry,
        }
    }

    /// A clock that counts how often it is asked.
    struct Counting {
        at: Fixed,
        steps: u32,
        reads: u32,
    }

    impl Clock for Counting {
        fn step(&mut self) -> u64 {
            self.steps += 1;
            self.at.step
        }
        fn counted(&mut self) -> u64 {
            self.at.step
        }
        fn now(&mut self) -> Instant {
            self.reads += 1;
            self.at.now
        }
    }

    fn counting(step: u64, now: Instant) -> Counting {
        Counting {
            at: Fixed { step, now },
            steps: 0,
            reads: 0,
        }
    }

    #[test]
    fn a_closed_door_calls_without_reading_either_clock() {
        let mut clock = counting(1, Instant::now());
        let verdict = door(Entry::Closed { quiet: true }).admit(false, &mut clock);
        assert_eq!(verdict, Verdict::Call);
        assert_eq!((clock.steps, clock.reads), (0, 0));
    }

    #[test]
    fn an_open_door_counts_calls_until_the_probe() {
        let now = Instant::now();
        let open = door(Entry::Open {
            due: Due::At {
                step: Some(9),
                time: None,
            },
            forced: false,
        });
        let mut clock = counting(6, now);
        let Verdict::Skip(skip) = open.admit(false, &mut clock) else {
            panic!("skipped")
        };
        assert_eq!(skip.next_probe, NextProbe::After { calls: 3, at: None });
        assert_eq!((clock.steps, clock.reads), (1, 0));
        assert_eq!(open.admit(false, &mut counting(9, now)), Verdict::Probe);
        // Killed at the step that reaches the gate: skipped, and the step is taken.
        let mut clock = counting(9, now);
        assert!(
            matches!(open.admit(true, &mut clock), Verdict::Skip(s) if s.reason == Reason::Killed)
        );
        assert_eq!(clock.steps, 1);
    }

    #[test]
    fn an_open_door_in_time_reads_the_clock_once() {
        let now = Instant::now();
        let due = now + Duration::from_secs(30);
        let open = door(Entry::Open {
            due: Due::At {
                step: None,
                time: Some(due),
            },
            forced: false,
        });
        let mut clock = counting(1, now);
        let Verdict::Skip(skip) = open.admit(false, &mut clock) else {
            panic!("skipped")
        };
        assert_eq!(
            skip.next_probe,
            NextProbe::After {
                calls: 1,
                at: Some(due)
            }
        );
        assert_eq!((clock.steps, clock.reads), (0, 1));
        assert_eq!(open.admit(false, &mut counting(1, due)), Verdict::Probe);
    }

    #[test]
    fn observe_only_turns_a_skip_into_a_shadow_call_but_not_a_kill() {
        let open = Door {
            epoch: Epoch::new(1, Mode::ObserveOnly),
            entry: Entry::Open {
                due: Due::Never,
                forced: true,
            },
        };
        let mut clock = counting(1, Instant::now());
        assert_eq!(
            open.admit(false, &mut clock),
            Verdict::Shadow(Reason::ForcedOpen)
        );
        assert!(matches!(open.admit(true, &mut clock), Verdict::Skip(_)));
    }

    #[test]
    fn a_half_open_door_past_its_dwell_limit_goes_to_the_machine() {
        let now = Instant::now();
        let half_open = door(Entry::HalfOpen {
            free: false,
            until: Some(now),
        });
        assert_eq!(
            half_open.admit(false, &mut counting(1, now)),
            Verdict::Expired
        );
        let earlier = now - Duration::from_millis(1);
        assert!(matches!(
            half_open.admit(false, &mut counting(1, earlier)),
            Verdict::Skip(s) if s.next_probe == NextProbe::InFlight
        ));
    }

    #[test]
    fn epochs_differ_by_generation_and_by_mode() {
        assert_ne!(Epoch::new(1, Mode::Enabled), Epoch::new(2, Mode::Enabled));
        assert_ne!(Epoch::new(1, Mode::Enabled), Epoch::new(1, Mode::Disabled));
        assert_eq!(Epoch::new(5, Mode::ObserveOnly).mode(), Mode::ObserveOnly);
        let epoch = Epoch::new(u64::MAX, Mode::Disabled);
        assert_eq!(Epoch::from_bits(epoch.bits()), epoch);
    }
}
