//! Go-style durations (`30s`, `1m30s`, `1.5h`, `300ms`), the format of `for`.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The longest duration Go can hold (`math.MaxInt64` nanoseconds, about 2562047h):
/// the CRD refuses longer `for` windows, and so does the operator.
pub const MAX_GO_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// `t + d`, saturating at the latest time there is.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Parses a Go duration. Returns `None` for anything the CRD would refuse:
/// malformed, or longer than [`MAX_GO_DURATION`].
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty()
            || num.starts_with('.')
            || num.ends_with('.')
            || num.matches('.').count() > 1
        {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let (unit_secs, unit_len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .filter(|(u, _)| tail.starts_with(u))
        .map(|(u, secs)| (*secs, u.len()))
        // "ms" must win over "m": take the longest unit that fits.
        .max_by_key(|(_, len)| *len)?;
        total += value * unit_secs;
        rest = &tail[unit_len..];
    }
    Duration::try_from_secs_f64(total)
        .ok()
        .filter(|d| *d <= MAX_GO_DURATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("2h0m5s"), Some(Duration::from_secs(7205)));
        assert_eq!(parse_go_duration("10µs"), Some(Duration::from_micros(10)));
        assert_eq!(
            parse_go_duration("2562047h"),
            Some(Duration::from_secs(2_562_047 * 3600))
        );
    }

    #[test]
    fn refuses_malformed_durations() {
        for bad in [
            "",
            "30",
            "s",
            "1.s",
            ".5s",
            "30 seconds",
            "1d",
            "-5s",
            "1..2s",
            "2562048h",
            "99999999999h",
            "9223372036854775808ns",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
