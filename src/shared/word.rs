//! What the lock-free paths read: the machine's state as one word, and the gates an
//! open (or full half-open) breaker publishes with it. Written under the machine's lock
//! after every change ([`Shared`](super::Shared)'s `locked`), read with atomics alone.

use std::time::Instant;

use crate::machine::{LockFree, LockFreeGate, Machine, Mode, State};

/// The machine's state as one number: `epoch << 9 | slots_taken << 8 | half_open_full << 7
/// | state << 5 | flags`, flags being `closed` (1), `passthrough` (2), `open` (4),
/// `counts` (8) and `forced_open` (16).
///
/// - `closed`: closed, enabled, no failure counted, no slow-call rule
///   (`Machine::lock_free`): a call is admitted, and its success counted, with atomics.
/// - `passthrough`: disabled mode: a call is admitted with no bookkeeping at all.
/// - `open`: open and enabled: a call is skipped with atomics until the step reaches
///   `open_until` and the clock `open_time` (or never, for a gate only a person opens).
/// - `counts`: not disabled: a killed call is counted as a skipped step.
/// - `forced_open`: forced open and enabled: a call is skipped with atomics.
/// - `half_open_full`: half-open, enabled, every probe slot taken: a call is skipped
///   with atomics until `open_time` (the dwell limit), if set.
/// - `slots_taken`: with `open`, probes of an earlier half-open still take every slot:
///   a skipped call whose successor would reach the gate is told a probe is in flight.
#[derive(Clone, Copy)]
pub(super) struct Word(pub(super) u64);

impl Word {
    pub(super) fn of(machine: &Machine, lock_free: &LockFree) -> Word {
        let flags = u64::from(lock_free.closed)
            | u64::from(machine.mode() == Mode::Disabled) << 1
            | u64::from(lock_free.open.is_some()) << 2
            | u64::from(machine.mode() != Mode::Disabled) << 3
            | u64::from(lock_free.forced_open) << 4
            | u64::from(lock_free.half_open_full.is_some()) << 7
            | u64::from(lock_free.open.is_some_and(|gate| gate.slots_taken)) << 8;
        Word(machine.epoch() << 9 | machine.state().code() << 5 | flags)
    }

    pub(super) fn epoch(self) -> u64 {
        self.0 >> 9
    }

    pub(super) fn state(self) -> State {
        State::from_code(self.0 >> 5)
    }

    pub(super) fn closed(self) -> bool {
        self.0 & 1 != 0
    }

    pub(super) fn passthrough(self) -> bool {
        self.0 & 2 != 0
    }

    pub(super) fn open(self) -> bool {
        self.0 & 4 != 0
    }

    pub(super) fn counts(self) -> bool {
        self.0 & 8 != 0
    }

    pub(super) fn forced_open(self) -> bool {
        self.0 & 16 != 0
    }

    pub(super) fn half_open_full(self) -> bool {
        self.0 & 128 != 0
    }

    pub(super) fn slots_taken(self) -> bool {
        self.0 & 256 != 0
    }

    /// The low 16 bits of the epoch, which tag the gates published with this word.
    pub(super) fn tag(self) -> u64 {
        self.epoch() & 0xFFFF
    }
}

/// The open gate's step, tagged with the low 16 bits of its epoch: `tag << 48 | step`.
/// Step 0: no gate in calls; [`Gate::MANUAL`]: only a person opens it.
#[derive(Clone, Copy)]
pub(super) struct Gate(pub(super) u64);

impl Gate {
    pub(super) const STEP: u64 = (1 << 48) - 1;
    pub(super) const MANUAL: u64 = Self::STEP;

    pub(super) fn of(machine: &Machine, lock_free: &LockFree) -> Gate {
        let step = match lock_free.open {
            Some(LockFreeGate { manual: true, .. }) => Self::MANUAL,
            Some(LockFreeGate {
                step: Some(step), ..
            }) => step.min(Self::STEP - 1),
            _ => 0,
        };
        Gate((machine.epoch() & 0xFFFF) << 48 | step)
    }

    /// The step, if this gate was published with `word`.
    pub(super) fn step_for(self, word: Word) -> Option<u64> {
        (self.0 >> 48 == word.tag()).then_some(self.0 & Self::STEP)
    }
}

/// A gate's time, in whole microseconds since the breaker's `base` rounded down, tagged like
/// [`Gate`]: `tag << 48 | micros`; [`TimeGate::NONE`]: no gate in time. 48 bits of
/// microseconds last nine years; a time further off is published as [`TimeGate::FAR`],
/// which leaves every call to the machine.
#[derive(Clone, Copy)]
pub(super) struct TimeGate(pub(super) u64);

impl TimeGate {
    pub(super) const NONE: u64 = (1 << 48) - 1;
    pub(super) const FAR: u64 = Self::NONE - 1;

    pub(super) fn of(machine: &Machine, lock_free: &LockFree, base: Instant) -> TimeGate {
        let time = match (lock_free.open, lock_free.half_open_full) {
            (Some(gate), _) => gate.time,
            (None, dwell) => dwell.flatten(),
        };
        let micros = time.map_or(Self::NONE, |time| {
            let micros = time.saturating_duration_since(base).as_micros();
            u64::try_from(micros).unwrap_or(Self::FAR).min(Self::FAR)
        });
        TimeGate((machine.epoch() & 0xFFFF) << 48 | micros)
    }

    /// `Some(None)`: published with `word`, no gate in time; `Some(Some(micros))`: the
    /// time; `None`: not published with `word`, or too far off.
    pub(super) fn micros_for(self, word: Word) -> Option<Option<u64>> {
        if self.0 >> 48 != word.tag() {
            return None;
        }
        match self.0 & Self::NONE {
            Self::NONE => Some(None),
            Self::FAR => None,
            micros => Some(Some(micros)),
        }
    }
}
