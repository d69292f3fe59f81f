//! Go-style duration values (`500ms`, `1s`, `5m`, `1h30m`, `0`) as upstream flags take them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration flag value parsed the way Go's `time.ParseDuration` does (non-negative only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration(pub Duration);

impl FromStr for GoDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_duration(s).map(GoDuration)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl From<GoDuration> for Duration {
    fn from(d: GoDuration) -> Duration {
        d.0
    }
}

/// Parses `[0-9.]+(ns|us|µs|ms|s|m|h)` sequences; a bare `0` is zero. Negative values are refused.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(format!("invalid duration {input:?}"));
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total = 0f64;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        if start == i {
            return Err(format!("invalid duration {input:?}"));
        }
        let num: f64 = s[start..i]
            .parse()
            .map_err(|_| format!("invalid duration {input:?}"))?;
        let ustart = i;
        while i < bytes.len() && !(bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let unit = match &s[ustart..i] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in duration {input:?}")),
            u => return Err(format!("unknown unit {u:?} in duration {input:?}")),
        };
        total += num * unit;
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("").is_err());
    }
}
