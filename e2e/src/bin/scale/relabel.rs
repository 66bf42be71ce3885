//! How far from 1.00× a ratio of medians lands when the two runners are the same.
//!
//! The rounds of one phase spread widely on a shared 2-core machine (a round's
//! p50 moves up to 2.8× between the baseline's own rounds at 5,000 nodes:
//! docs/performance.md#round-to-round-noise), so a ratio of medians over a handful of rounds can pass or miss a 1.10×
//! goal by chance. Pooling both runners' rounds and splitting them every possible
//! way into groups of the two runners' sizes (a permutation test) shows the ratios
//! that identical runners would give on these very rounds: a PASS or MISS inside
//! that band says little about the runners.
//!
//! Paired rounds (both runners in the same phase, `paired`) give one ratio per
//! round instead; their band comes from inverting some rounds' ratios
//! (`sign_flip_band`).

use crate::phase::median;

/// The ratios of medians over every relabeling of the pooled rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Band {
    /// 5th percentile of the relabeled ratios.
    pub(crate) low: f64,
    /// 95th percentile.
    pub(crate) high: f64,
    /// Share of relabelings whose ratio is at least the measured one: how often
    /// identical runners would look at least this slow.
    pub(crate) at_least: f64,
}

/// Above this many splits the enumeration would take noticeable time; the
/// benchmark's at most 9 + 10 rounds make 92,378.
const MAX_SPLITS: u64 = 200_000;

/// The band for `ours` (the operator's per-round values) against `theirs` (the
/// baseline's). `None` when either side is empty, or with too many rounds to
/// enumerate.
pub(crate) fn relabeling_band(ours: &[f64], theirs: &[f64]) -> Option<Band> {
    let (k, n) = (ours.len(), ours.len() + theirs.len());
    if k == 0 || k == n || n > 32 || binomial(n as u64, k as u64) > MAX_SPLITS {
        return None;
    }
    let pool: Vec<f64> = ours.iter().chain(theirs).copied().collect();
    let ratio = |mask: u32| {
        let (mut a, mut b) = (Vec::with_capacity(k), Vec::with_capacity(n - k));
        for (i, x) in pool.iter().enumerate() {
            if mask & (1 << i) != 0 {
                a.push(*x)
            } else {
                b.push(*x)
            }
        }
        median(a) / median(b).max(1e-9)
    };
    let measured = ratio((1u32 << k) - 1);
    let mut ratios: Vec<f64> = splits(n as u32, k as u32).map(ratio).collect();
    ratios.sort_by(f64::total_cmp);
    Some(band_of(&ratios, measured))
}

/// Above this many paired rounds the sign flips are not enumerated (2^R medians).
const MAX_PAIRED_ROUNDS: usize = 20;

/// The band for the median of `ratios`, one per paired round (the operator's value
/// over the baseline's in the same phase). Identical runners are as likely to give
/// a round's ratio as its inverse, so every way of inverting some of the rounds'
/// ratios is equally likely under that hypothesis: the medians over all of them
/// give the band. `None` without rounds, or with too many to enumerate.
pub(crate) fn sign_flip_band(ratios: &[f64]) -> Option<Band> {
    let k = ratios.len();
    if k == 0 || k > MAX_PAIRED_ROUNDS || ratios.iter().any(|r| *r <= 0.0) {
        return None;
    }
    let measured = median(ratios.to_vec());
    let mut medians: Vec<f64> = (0u32..1 << k)
        .map(|mask| {
            let flipped = ratios
                .iter()
                .enumerate()
                .map(|(i, r)| if mask & (1 << i) != 0 { 1.0 / r } else { *r });
            median(flipped.collect())
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    Some(band_of(&medians, measured))
}

/// The 5–95 % band of sorted `values` and the share at least `measured`.
fn band_of(sorted: &[f64], measured: f64) -> Band {
    let last = (sorted.len() - 1) as f64;
    // Within a rounding error of the measured value counts as equal: the measured
    // arrangement itself is one of them.
    let at_least = sorted
        .iter()
        .filter(|r| **r >= measured * (1.0 - 1e-12))
        .count();
    Band {
        low: sorted[(0.05 * last).floor() as usize],
        high: sorted[(0.95 * last).ceil() as usize],
        at_least: at_least as f64 / sorted.len() as f64,
    }
}

fn binomial(n: u64, k: u64) -> u64 {
    (0..k.min(n - k)).fold(1, |c, i| c * (n - i) / (i + 1))
}

/// Every `n`-bit mask with exactly `k` bits set, in increasing order (Gosper's hack).
fn splits(n: u32, k: u32) -> impl Iterator<Item = u32> {
    let end = 1u64 << n;
    std::iter::successors(Some((1u64 << k) - 1), move |&m| {
        let low = m & m.wrapping_neg();
        let ripple = m + low;
        let next = (((ripple ^ m) >> 2) / low) | ripple;
        (next < end).then_some(next)
    })
    .map(|m| m as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_split_is_visited_once() {
        let masks: Vec<u32> = splits(5, 2).collect();
        assert_eq!(masks.len(), 10);
        assert!(masks.iter().all(|m| m.count_ones() == 2 && *m < 32));
        let mut unique = masks.clone();
        unique.dedup();
        assert_eq!(unique, masks, "increasing, so no repeats");
        assert_eq!(binomial(15, 7), 6435);
        assert_eq!(splits(15, 7).count(), 6435);
    }

    #[test]
    fn identical_rounds_give_one_everywhere() {
        let b = relabeling_band(&[5.0; 3], &[5.0; 4]).unwrap();
        assert_eq!(
            b,
            Band {
                low: 1.0,
                high: 1.0,
                at_least: 1.0
            }
        );
    }

    #[test]
    fn three_rounds_give_three_ratios() {
        // Operator {1}, baseline {2, 3}: the splits give 1/2.5, 2/2 and 3/1.5.
        let b = relabeling_band(&[1.0], &[2.0, 3.0]).unwrap();
        assert_eq!((b.low, b.high), (0.4, 2.0));
        assert_eq!(
            b.at_least, 1.0,
            "the lowest ratio: every split is at least as high"
        );
        let b = relabeling_band(&[3.0], &[1.0, 2.0]).unwrap();
        assert!((b.at_least - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_runner_slower_in_every_round_is_rare_among_relabelings() {
        let b = relabeling_band(&[10.0, 11.0, 12.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        // Of the 35 splits only two reach 11 / 2.5: the measured one, and
        // {4, 11, 12} against {1, 2, 3, 10}.
        assert!((b.at_least - 2.0 / 35.0).abs() < 1e-12);
        assert_eq!(b.high, 4.4);
        // {1, 2, 3} against {4, 10, 11, 12} (and one more split) give the lowest.
        assert_eq!(b.low, 2.0 / 10.5);
    }

    #[test]
    fn nothing_to_relabel_without_both_runners() {
        assert_eq!(relabeling_band(&[], &[1.0]), None);
        assert_eq!(relabeling_band(&[1.0], &[]), None);
    }

    #[test]
    fn paired_rounds_that_agree_give_a_narrow_band() {
        let b = sign_flip_band(&[1.0; 5]).unwrap();
        assert_eq!((b.low, b.high, b.at_least), (1.0, 1.0, 1.0));
        // 5 % either way in every round: the median of the flipped ones stays
        // within those 5 %, and half the flips reach the measured 1.05
        let b = sign_flip_band(&[1.05; 5]).unwrap();
        assert_eq!((b.low, b.high), (1.0 / 1.05, 1.05));
        assert_eq!(b.at_least, 0.5);
    }

    #[test]
    fn the_band_of_paired_rounds_enumerates_every_inversion() {
        // Rounds 2× and 1.1×: the four arrangements' medians are
        // (2 + 1.1) / 2, (0.5 + 1.1) / 2, (2 + 1/1.1) / 2 and (0.5 + 1/1.1) / 2.
        let b = sign_flip_band(&[2.0, 1.1]).unwrap();
        assert_eq!(b.low, (0.5 + 1.0 / 1.1) / 2.0);
        assert_eq!(b.high, 1.55);
        assert_eq!(b.at_least, 0.25, "only the measured one is that high");
        assert_eq!(sign_flip_band(&[]), None);
        assert_eq!(sign_flip_band(&[1.0; 21]), None);
    }
}
