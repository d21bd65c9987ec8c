//! The wait between two attempts to reach Redis: doubling from the first wait up to the
//! longest, each spread by up to half of it so that replicas cut off together do not
//! come back together.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct ReconnectWait {
    first: Duration,
    longest: Duration,
    attempts: u32,
    rng: u64,
}

impl ReconnectWait {
    pub(crate) fn new(first: Duration, longest: Duration, seed: u64) -> ReconnectWait {
        ReconnectWait {
            first,
            longest,
            attempts: 0,
            rng: seed | 1,
        }
    }

    /// The link came up: the next loss starts from the first wait.
    pub(crate) fn reset(&mut self) {
        self.attempts = 0;
    }

    /// The wait before the next attempt: between half and all of
    /// `min(first * 2^attempts, longest)`.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let base = self
            .first
            .saturating_mul(1u32 << self.attempts.min(20))
            .min(self.longest);
        self.attempts = self.attempts.saturating_add(1);
        base.mul_f64(0.5 + 0.5 * self.next_random())
    }

    /// xorshift64*, in [0, 1).
    fn next_random(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_and_start_over_after_a_success() {
        let ms = Duration::from_millis;
        let mut backoff = ReconnectWait::new(ms(100), ms(1000), 7);
        let waits: Vec<Duration> = (0..8).map(|_| backoff.next_wait()).collect();
        for (i, wait) in waits.iter().enumerate() {
            let base = ms(100 * (1 << i)).min(ms(1000));
            assert!(*wait >= base / 2 && *wait <= base, "attempt {i}: {wait:?}");
        }
        backoff.reset();
        assert!(backoff.next_wait() <= ms(100));
    }
}
