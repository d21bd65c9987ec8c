//! The door: everything an arriving call is decided on, and [`Door::admit`], the one
//! function that decides it.
//!
//! The machine derives its door from its state after every change ([`Machine::door`]);
//! the layer publishes the same words for calls to read without the machine's lock.
//! Both decide a call with the same [`Door::admit`]: a call decided without the lock is
//! decided by the machine's own rule on the machine's own state, as it stood when the
//! call read it. When the decision changes the state (a probe, a deadline that passed),
//! the machine makes it, under its lock, with the same function on its current door.
//! The one call decided from the first word alone, before the door is asked, is the one
//! [`Door::admit`] admits there without reading a clock: a plain call at a closed door
//! ([`Door::calls_at_once`]; a test checks that the two agree on every door).
//!
//! A door is three words, so that it is read, published and copied as words: the flags
//! and the epoch, the step an open breaker waits for, and a time (see [`Door`]).
//!
//! [`Machine::door`]: super::Machine::door

// Each `#[inline(always)]` here pays in the awaited benchmark (the door and the state
// words: docs/performance.md, "Inlining").
use std::time::Instant;

use super::Mode;
use crate::breaker::nanos::Nanos;
use crate::breaker::state::{Advice, NextProbe, Reason, Skip, State};

/// Generation and mode in one number. A call admitted in one epoch counts only while the
/// breaker is still in it: every change of state or of mode starts a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::breaker) struct Epoch(u64);

impl Epoch {
    /// Bits an epoch may use: it is packed with flags into one word.
    pub(in crate::breaker) const BITS: u32 = 56;

    pub(in crate::breaker) fn new(generation: u64, mode: Mode) -> Epoch {
        Epoch((generation << 2 | mode as u64) & ((1 << Self::BITS) - 1))
    }

    /// The epoch of these bits: the high byte of a word shifted right by 8 is clear.
    #[inline(always)]
    pub(in crate::breaker) fn from_bits(bits: u64) -> Epoch {
        Epoch(bits)
    }

    #[inline(always)]
    pub(in crate::breaker) fn bits(self) -> u64 {
        self.0
    }

    /// The generation part (the low 54 bits of the generation).
    pub(in crate::breaker) fn generation(self) -> u64 {
        self.0 >> 2
    }

    #[inline(always)]
    pub(in crate::breaker) fn mode(self) -> Mode {
        match self.0 & 3 {
            0 => Mode::Enabled,
            1 => Mode::ObserveOnly,
            _ => Mode::Disabled,
        }
    }
}

/// When an open breaker lets its probe through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::breaker) enum Due {
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
    /// The next call.
    pub(in crate::breaker) const NEXT_CALL: Due = Due::At {
        step: None,
        time: None,
    };

    /// Once the clock reaches `time`.
    pub(in crate::breaker) fn at(time: Instant) -> Due {
        Due::At {
            step: None,
            time: Some(time),
        }
    }
}

/// Everything an arriving call is decided on. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::breaker) struct Door {
    /// `epoch << 8 | flags` (see the constants below).
    pub(in crate::breaker) word: u64,
    /// Open: the step the probe waits for.
    pub(in crate::breaker) step: u64,
    /// Open: the time the probe waits for; half-open: when the machine must look.
    pub(in crate::breaker) time: i64,
}

/// What [`Door::admit`] decided for one call: how it is admitted, or that it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::breaker) enum Admission {
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
    /// A deadline passed (a half-open's dwell limit): the machine applies it, then
    /// decides.
    Expired,
}

impl Admission {
    /// What a caller that decides for itself is told of this admission: every kind of
    /// call made (closed, disabled, observe-only) is [`Advice::Call`]. `None` for
    /// [`Admission::Expired`]: the machine must apply the deadline and decide again.
    pub(in crate::breaker) fn advice(self) -> Option<Advice> {
        match self {
            Admission::Call | Admission::Pass | Admission::Shadow(_) => Some(Advice::Call),
            Admission::Probe => Some(Advice::Probe),
            Admission::Skip(skip) => Some(Advice::Skip(skip)),
            Admission::Expired => None,
        }
    }
}

/// The two clocks a call is decided on, read only when the decision needs them.
pub(in crate::breaker) trait Clock {
    /// This call's step on the count of calls an open breaker waits for. The first call
    /// takes the step; later calls return the same one.
    fn step(&mut self) -> u64;
    /// The calls counted so far, without taking a step.
    fn counted(&mut self) -> u64;
    /// The time now. The first call reads the clock; later calls return the same time.
    fn now(&mut self) -> Instant;

    /// Whether the time now is before `at`: what every deadline is decided by. A clock
    /// may know it without reading the time.
    #[inline(always)]
    fn before(&mut self, at: Nanos) -> bool {
        self.now() < at.instant()
    }

    /// The calls counted so far and the time now, for what the machine does at once.
    fn fixed(&mut self) -> Fixed {
        Fixed {
            step: self.counted(),
            now: self.now(),
        }
    }
}

/// A clock that has already been read: for a call, its step; for anything else, the
/// calls counted so far.
#[derive(Debug, Clone, Copy)]
pub(in crate::breaker) struct Fixed {
    pub(in crate::breaker) step: u64,
    pub(in crate::breaker) now: Instant,
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
    const CLOSED: u64 = 0;
    const OPEN: u64 = 1;
    const HALF_OPEN: u64 = 2;
    const KIND: u64 = 3;
    /// Closed: quiet; open: forced; half-open: a slot is free.
    const FLAG: u64 = 1 << 2;
    /// Open: due never.
    const NEVER: u64 = 1 << 3;
    const HAS_STEP: u64 = 1 << 4;
    const HAS_TIME: u64 = 1 << 5;
    /// Calls are timed, for a slow-call rule.
    pub(in crate::breaker) const TIMED: u64 = 1 << 6;
    /// Open: the service asked to wait longer than the probe waits (a `Retry-After`
    /// above the cap); its skips say so ([`Skip::asked_longer`]).
    const ASKED_LONGER: u64 = 1 << 7;
    pub(in crate::breaker) const EPOCH_SHIFT: u32 = 8;

    fn made(epoch: Epoch, flags: u64, step: u64, time: Option<Instant>) -> Door {
        let (has_time, time) = time.map_or((0, 0), |at| (Self::HAS_TIME, Nanos::of(at).0));
        Door {
            word: epoch.bits() << Self::EPOCH_SHIFT | flags | has_time,
            step,
            time,
        }
    }

    fn flag_if(on: bool) -> u64 {
        u64::from(on) * Self::FLAG
    }

    /// A closed door: calls go through. `quiet`: a success changes nothing but the
    /// counts (no failure counted, consecutive failures the policy, no slow-call rule).
    pub(in crate::breaker) fn closed(epoch: Epoch, quiet: bool) -> Door {
        Self::made(epoch, Self::CLOSED | Self::flag_if(quiet), 0, None)
    }

    /// An open door: calls are skipped until `due`, then the next one is the probe.
    /// `forced`: a person opened it; `asked_longer`: the service asked to wait longer
    /// than `due` (its skips say so).
    pub(in crate::breaker) fn open(
        epoch: Epoch,
        due: Due,
        forced: bool,
        asked_longer: bool,
    ) -> Door {
        let asked = if asked_longer { Self::ASKED_LONGER } else { 0 };
        let flags = Self::OPEN | Self::flag_if(forced) | asked;
        match due {
            Due::Never => Self::made(epoch, flags | Self::NEVER, 0, None),
            Due::At { step, time } => {
                let has_step = if step.is_some() { Self::HAS_STEP } else { 0 };
                Self::made(epoch, flags | has_step, step.unwrap_or(0), time)
            }
        }
    }

    /// A half-open door: probes go while a slot is `free`, everyone else is skipped; at
    /// `until` (a dwell limit) the machine must look again. A limit the door cannot keep
    /// exactly (a paused clock moved on by centuries) is left out: read early, it would
    /// send every call to a machine that finds it not passed.
    pub(in crate::breaker) fn half_open(epoch: Epoch, free: bool, until: Option<Instant>) -> Door {
        let until = until.filter(|&at| Nanos::holds(at));
        Self::made(epoch, Self::HALF_OPEN | Self::flag_if(free), 0, until)
    }

    /// The same door, its calls timed for a slow-call rule (`timed`).
    pub(in crate::breaker) fn timed_if(mut self, timed: bool) -> Door {
        if timed {
            self.word |= Self::TIMED;
        }
        self
    }

    /// Whether calls are timed, for a slow-call rule.
    #[inline(always)]
    pub(in crate::breaker) fn timed(&self) -> bool {
        self.word & Self::TIMED != 0
    }

    /// Whether an open door's wait is shorter than the service asked for.
    #[cfg(test)]
    pub(in crate::breaker) fn asked_longer(&self) -> bool {
        self.word & Self::ASKED_LONGER != 0
    }

    /// An open door's wait.
    #[cfg(test)]
    pub(in crate::breaker) fn due(&self) -> Option<Due> {
        match self.word & Self::KIND {
            Self::OPEN if self.word & Self::NEVER != 0 => Some(Due::Never),
            Self::OPEN => Some(Due::At {
                step: self.due_step(),
                time: self.time().map(Nanos::instant),
            }),
            _ => None,
        }
    }

    /// A half-open door's deadline.
    #[cfg(test)]
    pub(in crate::breaker) fn until(&self) -> Option<Instant> {
        match self.word & Self::KIND {
            Self::HALF_OPEN => self.time().map(Nanos::instant),
            _ => None,
        }
    }

    /// Whether a door of this first word admits any call as a plain call, unless killed:
    /// closed, in a mode other than disabled. [`admit`](Self::admit) says the same of
    /// such a door, without reading a clock; this says it from the word alone.
    #[inline(always)]
    pub(in crate::breaker) fn calls_at_once(word: u64) -> bool {
        let door = Door::alone(word);
        word & Self::KIND == Self::CLOSED && door.mode() != Mode::Disabled
    }

    /// The door of a first word that is the whole door ([`word_alone`](Self::word_alone)).
    #[inline(always)]
    pub(in crate::breaker) fn alone(word: u64) -> Door {
        Door {
            word,
            step: 0,
            time: 0,
        }
    }

    /// Whether the word alone is the whole door: closed, or half-open with no deadline.
    #[inline(always)]
    pub(in crate::breaker) fn word_alone(word: u64) -> bool {
        // Closed (kind 0), or half-open (kind 2) without a time: kind 1 and kind 3 (none)
        // have bit 0 set, a half-open with a time has bit 5.
        word & (1 | Self::HAS_TIME) == 0
    }

    #[inline(always)]
    pub(in crate::breaker) fn epoch(&self) -> Epoch {
        Epoch::from_bits(self.word >> Self::EPOCH_SHIFT)
    }

    #[inline(always)]
    fn flag(&self) -> bool {
        self.word & Self::FLAG != 0
    }

    #[inline(always)]
    fn due_step(&self) -> Option<u64> {
        (self.word & Self::HAS_STEP != 0).then_some(self.step)
    }

    #[inline(always)]
    fn time(&self) -> Option<Nanos> {
        (self.word & Self::HAS_TIME != 0).then_some(Nanos(self.time))
    }

    /// The state a call finds.
    #[inline(always)]
    pub(in crate::breaker) fn state(&self) -> State {
        match self.word & Self::KIND {
            Self::CLOSED => State::Closed,
            Self::OPEN if self.flag() => State::ForcedOpen,
            Self::OPEN => State::Open,
            _ => State::HalfOpen,
        }
    }

    #[inline(always)]
    pub(in crate::breaker) fn mode(&self) -> Mode {
        self.epoch().mode()
    }

    /// Whether, at the door whose first word is `word`, a success of a call admitted in
    /// `epoch` would change nothing but the counts. Whether calls are timed does not
    /// matter: a quiet door has no slow-call rule, so a timed call is timed only to tell
    /// observers how long it took.
    #[inline(always)]
    pub(in crate::breaker) fn quiet_in(word: u64, epoch: Epoch) -> bool {
        word & !Self::TIMED == epoch.bits() << Self::EPOCH_SHIFT | Self::CLOSED | Self::FLAG
    }

    /// Whether a call admitted in `epoch` still stands at the door whose first word is
    /// `word`.
    #[inline(always)]
    pub(in crate::breaker) fn in_epoch(word: u64, epoch: Epoch) -> bool {
        word >> Self::EPOCH_SHIFT == epoch.bits()
    }

    /// When the probe may go, as a call skipped `at` (its step the calls counted so far)
    /// is told: what [`Door::gate`] would tell it. A disabled breaker needs none.
    pub(in crate::breaker) fn next_probe(&self, mut at: Fixed) -> NextProbe {
        if self.mode() == Mode::Disabled {
            return NextProbe::NotNeeded;
        }
        match self.gate(&mut at) {
            Admission::Skip(skip) => skip.next_probe(),
            Admission::Call => NextProbe::NotNeeded,
            _ => NextProbe::After { calls: 1, at: None },
        }
    }

    /// What the state alone makes of an arriving call (before the kill switch, the mode
    /// and a passed deadline): made (closed), the probe, or skipped and told when the
    /// probe may go.
    #[inline(always)]
    fn gate(&self, clock: &mut impl Clock) -> Admission {
        let state = self.state();
        match self.word & Self::KIND {
            Self::CLOSED => Admission::Call,
            Self::OPEN => {
                let reason = if self.flag() {
                    Reason::ForcedOpen
                } else {
                    Reason::Open
                };
                if self.word & Self::NEVER != 0 {
                    return Admission::Skip(Skip::new(reason, state, NextProbe::Manual));
                }
                // The call's step is taken when the wait is counted in calls, and the
                // clock read only when it is counted in time.
                let calls = self.due_step().map(|due| due.saturating_sub(clock.step()));
                let at = match self.time() {
                    Some(due) if clock.before(due) => Some(due),
                    _ => None,
                };
                match (calls, at) {
                    (None | Some(0), None) => Admission::Probe,
                    (calls, at) => {
                        let calls = calls.unwrap_or(1).max(1);
                        let asked = self.word & Self::ASKED_LONGER != 0;
                        Admission::Skip(Skip::waiting(reason, state, calls, at, asked))
                    }
                }
            }
            _ if self.flag() => Admission::Probe,
            _ => Admission::Skip(Skip::new(Reason::HalfOpenFull, state, NextProbe::InFlight)),
        }
    }

    /// Whether, at the door whose first word is `word`, a deadline may pass that ends
    /// the state: a half-open's dwell limit.
    #[inline(always)]
    pub(in crate::breaker) fn may_expire(word: u64) -> bool {
        word & (Self::KIND | Self::HAS_TIME) == Self::HALF_OPEN | Self::HAS_TIME
    }

    /// Whether the door's deadline has passed (see [`Door::may_expire`]): then the
    /// machine must apply it before any call is made at this door.
    #[inline(always)]
    pub(in crate::breaker) fn expired(&self, clock: &mut impl Clock) -> bool {
        Self::may_expire(self.word) && self.time().is_some_and(|until| !clock.before(until))
    }

    /// Decides one arriving call. The kill switch skips every call, in every mode, and
    /// changes nothing else; in an open breaker whose cooldown counts calls, a killed
    /// call still takes its step.
    #[inline(always)]
    pub(in crate::breaker) fn admit(&self, killed: bool, clock: &mut impl Clock) -> Admission {
        // A deadline that passed applies first, whatever becomes of the call: the state
        // it finds is the state after it.
        if self.expired(clock) {
            return Admission::Expired;
        }
        let disabled = self.mode() == Mode::Disabled;
        if killed {
            if self.word & (Self::KIND | Self::HAS_STEP) == Self::OPEN | Self::HAS_STEP && !disabled
            {
                clock.step();
            }
            return Admission::Skip(Skip::new(Reason::Killed, self.state(), NextProbe::Manual));
        }
        if disabled {
            return Admission::Pass;
        }
        match self.gate(clock) {
            Admission::Skip(skip) if self.mode() == Mode::ObserveOnly => {
                Admission::Shadow(skip.reason())
            }
            admission => admission,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const EPOCH: Epoch = Epoch(7 << 2);

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
        let admission = Door::closed(EPOCH, true).admit(false, &mut clock);
        assert_eq!(admission, Admission::Call);
        assert_eq!((clock.steps, clock.reads), (0, 0));
    }

    #[test]
    fn an_open_door_counts_calls_until_the_probe() {
        let now = Instant::now();
        let due = Due::At {
            step: Some(9),
            time: None,
        };
        let open = Door::open(EPOCH, due, false, false);
        let mut clock = counting(6, now);
        let Admission::Skip(skip) = open.admit(false, &mut clock) else {
            panic!("skipped")
        };
        assert_eq!(skip.next_probe(), NextProbe::After { calls: 3, at: None });
        assert_eq!((clock.steps, clock.reads), (1, 0));
        assert_eq!(open.admit(false, &mut counting(9, now)), Admission::Probe);
        // Killed at the step that reaches the gate: skipped, and the step is taken.
        let mut clock = counting(9, now);
        assert!(
            matches!(open.admit(true, &mut clock), Admission::Skip(s) if s.reason() == Reason::Killed)
        );
        assert_eq!(clock.steps, 1);
    }

    #[test]
    fn an_open_door_in_time_reads_the_clock_once() {
        let now = Instant::now();
        let due = now + Duration::from_secs(30);
        let at = Due::At {
            step: None,
            time: Some(due),
        };
        let open = Door::open(EPOCH, at, false, false);
        let mut clock = counting(1, now);
        let Admission::Skip(skip) = open.admit(false, &mut clock) else {
            panic!("skipped")
        };
        assert_eq!(
            skip.next_probe(),
            NextProbe::After {
                calls: 1,
                at: Some(due)
            }
        );
        assert_eq!((clock.steps, clock.reads), (0, 1));
        assert_eq!(open.admit(false, &mut counting(1, due)), Admission::Probe);
    }

    #[test]
    fn a_skip_at_a_door_whose_wait_was_cut_says_the_service_asked_longer() {
        let now = Instant::now();
        let due = Due::at(now + Duration::from_secs(300));
        for asked in [false, true] {
            let open = Door::open(EPOCH, due, false, asked);
            let Admission::Skip(skip) = open.admit(false, &mut counting(1, now)) else {
                panic!("skipped")
            };
            assert_eq!(skip.asked_longer(), asked);
            assert_eq!(
                skip.next_probe().retry_after(now),
                Some(Duration::from_secs(300))
            );
            // The kill switch's skip says nothing of the wait: only a person ends it.
            let Admission::Skip(killed) = open.admit(true, &mut counting(1, now)) else {
                panic!("skipped")
            };
            assert!(!killed.asked_longer());
        }
    }

    #[test]
    fn observe_only_turns_a_skip_into_a_shadow_call_but_not_a_kill() {
        let open = Door::open(Epoch::new(1, Mode::ObserveOnly), Due::Never, true, false);
        let mut clock = counting(1, Instant::now());
        assert_eq!(
            open.admit(false, &mut clock),
            Admission::Shadow(Reason::ForcedOpen)
        );
        assert!(matches!(open.admit(true, &mut clock), Admission::Skip(_)));
    }

    #[test]
    fn a_half_open_door_past_its_dwell_limit_goes_to_the_machine() {
        let now = Instant::now();
        let half_open = Door::half_open(EPOCH, false, Some(now));
        assert_eq!(
            half_open.admit(false, &mut counting(1, now)),
            Admission::Expired
        );
        let earlier = now - Duration::from_millis(1);
        assert!(matches!(
            half_open.admit(false, &mut counting(1, earlier)),
            Admission::Skip(s) if s.next_probe() == NextProbe::InFlight
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

    proptest::proptest! {
        #[test]
        fn a_door_says_exactly_what_it_was_made_from(
            generation in 0u64..1 << 54,
            mode in proptest::sample::select(vec![Mode::Enabled, Mode::ObserveOnly, Mode::Disabled]),
            kind in 0u8..3,
            flag in proptest::bool::ANY,
            never in proptest::bool::ANY,
            step in proptest::option::of(proptest::num::u64::ANY),
            nanos in proptest::option::of(0u64..1 << 62),
            timed in proptest::bool::ANY,
            asked in proptest::bool::ANY,
        ) {
            let epoch = Epoch::new(generation, mode);
            let time = nanos.map(|n| Instant::now() + Duration::from_nanos(n));
            let due = if never { Due::Never } else { Due::At { step, time } };
            let door = match kind {
                0 => Door::closed(epoch, flag),
                1 => Door::open(epoch, due, flag, asked),
                _ => Door::half_open(epoch, flag, time),
            }
            .timed_if(timed);
            proptest::prop_assert_eq!(door.epoch(), epoch);
            proptest::prop_assert_eq!(door.mode(), mode);
            proptest::prop_assert_eq!(door.timed(), timed);
            // A call admitted at once from the word is the call the door admits, and the
            // door reads no clock for it.
            let mut clock = counting(1, Instant::now());
            let admitted = door.admit(false, &mut clock);
            proptest::prop_assert_eq!(
                Door::calls_at_once(door.word),
                admitted == Admission::Call && (clock.steps, clock.reads) == (0, 0),
                "{:?} admits {:?}",
                door,
                admitted,
            );
            match kind {
                0 => {
                    proptest::prop_assert_eq!(door.state(), State::Closed);
                    // Timing alone does not make a success count: a slow-call rule clears the flag.
                    proptest::prop_assert_eq!(Door::quiet_in(door.word, epoch), flag);
                }
                1 => {
                    let state = if flag { State::ForcedOpen } else { State::Open };
                    proptest::prop_assert_eq!(door.state(), state);
                    proptest::prop_assert_eq!(door.due(), Some(due));
                    proptest::prop_assert_eq!(door.asked_longer(), asked);
                }
                _ => {
                    proptest::prop_assert_eq!(door.state(), State::HalfOpen);
                    proptest::prop_assert_eq!(door.until(), time);
                }
            }
        }
    }
}
