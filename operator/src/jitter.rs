//! Random spread on waits, so that replicas, watches and nodes that failed
//! together do not all come back at the same moment.

use std::{
    hash::{BuildHasher, RandomState},
    time::Duration,
};

/// `wait` scaled by a random factor in [1 - spread, 1 + spread).
pub fn jitter(wait: Duration, spread: f64) -> Duration {
    // A freshly seeded std hasher is random enough for this and needs no crate.
    let random = RandomState::new().hash_one(std::time::Instant::now());
    wait.mul_f64(1.0 - spread + 2.0 * spread * (random as f64 / u64::MAX as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_kept_and_used() {
        let base = Duration::from_secs(100);
        let waits: Vec<Duration> = (0..200).map(|_| jitter(base, 0.1)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= base.mul_f64(0.9) && *w < base.mul_f64(1.1))
        );
        assert!(waits.iter().any(|w| *w != waits[0]), "not one fixed value");
        assert_eq!(jitter(base, 0.0), base);
    }
}
