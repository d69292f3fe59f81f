//! Cron schedules as a CronJob's `spec.schedule` takes them (upstream parses with robfig/cron's
//! standard parser): five fields — minute, hour, day of month, month, day of week — each a
//! `*`, `?`, number, name (`jan`, `mon`), range, list or step, or a descriptor (`@hourly`,
//! `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`, `@every <duration>`).
//! Parsing is bounded by the text (each field is a bit set); matching is pure.

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Minute, hour, day-of-month, month and day-of-week sets (bit n = value n); whether the
    /// day-of-month or day-of-week field was a `*`/`?` (cron's "either day matches" rule).
    Fields {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
        dom_star: bool,
        dow_star: bool,
    },
    /// `@every <duration>`: a fixed interval in seconds (at least 1).
    Every(u64),
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    /// Parses a schedule; the error reads as upstream's validation message does.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if let Some(d) = text.strip_prefix('@') {
            return Self::descriptor(d);
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {text}",
                fields.len()
            ));
        }
        let minute = field(fields[0], 0, 59, &[])?;
        let hour = field(fields[1], 0, 23, &[])?;
        let dom = field(fields[2], 1, 31, &[])?;
        let month = field(fields[3], 1, 12, &MONTHS)?;
        let mut dow = field(fields[4], 0, 7, &DAYS)?;
        if dow & (1 << 7) != 0 {
            dow = (dow & !(1 << 7)) | 1;
        }
        let star = |f: &str| f.starts_with('*') || f.starts_with('?');
        Ok(Schedule::Fields {
            minute,
            hour,
            dom,
            month,
            dow,
            dom_star: star(fields[2]),
            dow_star: star(fields[4]),
        })
    }

    fn descriptor(d: &str) -> Result<Schedule, String> {
        let fixed = match d {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            _ => {
                let Some(dur) = d.strip_prefix("every ") else {
                    return Err(format!("unrecognized descriptor: @{d}"));
                };
                return match duration_secs(dur.trim()) {
                    Some(s) if s >= 1 => Ok(Schedule::Every(s)),
                    _ => Err(format!("failed to parse duration @{d}")),
                };
            }
        };
        Self::parse(fixed)
    }

    /// Whether the schedule fires at this minute (UTC, broken down).
    pub fn matches(&self, t: &Civil) -> bool {
        match *self {
            Schedule::Every(_) => false,
            Schedule::Fields {
                minute,
                hour,
                dom,
                month,
                dow,
                dom_star,
                dow_star,
            } => {
                let bit = |set: u64, v: u32| set & (1 << v) != 0;
                let day_dom = bit(dom, t.day);
                let day_dow = bit(dow, t.weekday);
                let day = if dom_star || dow_star {
                    day_dom && day_dow
                } else {
                    day_dom || day_dow
                };
                bit(minute, t.minute) && bit(hour, t.hour) && bit(month, t.month) && day
            }
        }
    }

    /// The first firing strictly after `after` (seconds since the epoch, UTC), searched at
    /// most `horizon` seconds ahead; None when it does not fire within it.
    pub fn next_after(&self, after: i64, horizon: i64) -> Option<i64> {
        self.next_after_in(after, horizon, &|_| 0)
    }

    /// As `next_after`, with the fields read in a zone whose UTC offset (seconds) at an
    /// instant is `offset(instant)`: local times a DST change skips never fire.
    pub fn next_after_in(
        &self,
        after: i64,
        horizon: i64,
        offset: &dyn Fn(i64) -> i64,
    ) -> Option<i64> {
        if let Schedule::Every(secs) = *self {
            return Some(after + secs as i64);
        }
        let mut t = (after.div_euclid(60) + 1) * 60;
        let end = after.saturating_add(horizon);
        while t <= end {
            let off = offset(t);
            let c = Civil::from_unix(t + off);
            if self.matches(&c) {
                return Some(t);
            }
            // Skip whole local hours that cannot match.
            if let Schedule::Fields { hour, month, .. } = *self {
                if month & (1 << c.month) == 0 || hour & (1 << c.hour) == 0 {
                    let local = t + off;
                    t = ((local.div_euclid(3600) + 1) * 3600 - off).max(t + 60);
                    continue;
                }
            }
            t += 60;
        }
        None
    }

    /// The last firing at or before `at` and after `earliest` (exclusive), and how many
    /// firings fell in that window (counted up to `cap`, so the work stays bounded).
    pub fn last_between(
        &self,
        earliest: i64,
        at: i64,
        cap: usize,
        offset: &dyn Fn(i64) -> i64,
    ) -> (Option<i64>, usize) {
        if at <= earliest {
            return (None, 0);
        }
        if let Schedule::Every(secs) = *self {
            let n = (at - earliest) / secs as i64;
            return (
                (n > 0).then(|| earliest + n * secs as i64),
                (n as usize).min(cap),
            );
        }
        let mut count = 0;
        let mut last = None;
        let mut t = earliest;
        // Forward while the count is small; the rest is found walking back from `at`.
        while count < cap {
            match self.next_after_in(t, at - t, offset) {
                Some(n) if n <= at => {
                    count += 1;
                    last = Some(n);
                    t = n;
                }
                _ => return (last, count),
            }
        }
        let mut m = at.div_euclid(60) * 60;
        while m > t {
            if self.matches(&Civil::from_unix(m + offset(m))) {
                return (Some(m), count);
            }
            m -= 60;
        }
        (last, count)
    }
}

/// A UTC instant broken into the fields cron matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub minute: u32,
    pub hour: u32,
    pub day: u32,
    pub month: u32,
    /// 0 = Sunday.
    pub weekday: u32,
}

impl Civil {
    pub fn from_unix(secs: i64) -> Civil {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let _ = era;
        Civil {
            minute: ((rem / 60) % 60) as u32,
            hour: (rem / 3600) as u32,
            day,
            month,
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }
}

/// A Go duration of whole hours, minutes and seconds (`1h30m`, `90s`) in seconds.
fn duration_secs(text: &str) -> Option<u64> {
    let (mut total, mut num) = (0u64, String::new());
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    for c in text.chars() {
        match c {
            '0'..='9' => num.push(c),
            'h' | 'm' | 's' => {
                let n: u64 = num.parse().ok()?;
                num.clear();
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total = total.checked_add(n.checked_mul(unit)?)?;
            }
            _ => return None,
        }
    }
    num.is_empty().then_some(total)
}

/// One field as a bit set over `[lo, hi]`.
fn field(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("failed to parse int from {s}: invalid syntax"))?;
                if step == 0 {
                    return Err(format!("step of range should be a positive number: {part}"));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, lo, hi, names)?, value(b, lo, hi, names)?)
        } else {
            let v = value(range, lo, hi, names)?;
            (v, if step.is_some() { hi } else { v })
        };
        if start > end {
            return Err(format!(
                "beginning of range ({start}) beyond end of range ({end}): {part}"
            ));
        }
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        // Months are 1-based, days 0-based.
        return Ok(i as u32 + if lo == 1 { 1 } else { 0 });
    }
    let v: u32 = text
        .parse()
        .map_err(|_| format!("failed to parse int from {text}: invalid syntax"))?;
    if v < lo {
        return Err(format!(
            "beginning of range ({v}) below minimum ({lo}): {text}"
        ));
    }
    if v > hi {
        return Err(format!("end of range ({v}) above maximum ({hi}): {text}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_schedules_parse_and_fire() {
        let s = Schedule::parse("*/15 2 * * mon-fri").unwrap();
        // 2026-11-24 02:15 UTC is a Tuesday.
        let t = 1_795_486_500;
        let c = Civil::from_unix(t);
        assert_eq!(
            (c.month, c.day, c.hour, c.minute, c.weekday),
            (11, 24, 2, 15, 2)
        );
        assert!(s.matches(&c));
        assert_eq!(s.next_after(t, 86_400), Some(t + 900));
        assert!(Schedule::parse("@hourly").is_ok());
        assert_eq!(Schedule::parse("@every 1h30m"), Ok(Schedule::Every(5400)));
        assert_eq!(
            Schedule::parse("0 0 * * 7").unwrap(),
            Schedule::parse("0 0 * * 0").unwrap()
        );
    }

    #[test]
    fn zones_and_windows() {
        let s = Schedule::parse("0 9 * * *").unwrap();
        // 2026-01-01T00:00:00Z; 09:00 in UTC+2 is 07:00Z.
        let day = 1_767_225_600;
        assert_eq!(
            s.next_after_in(day, 86_400, &|_| 7200),
            Some(day + 7 * 3600)
        );
        // India's +05:30: 09:00 local is 03:30Z.
        assert_eq!(
            s.next_after_in(day, 86_400, &|_| 19_800),
            Some(day + 3 * 3600 + 1800)
        );
        // Three days of a daily schedule: the last one, three counted.
        let (last, n) = s.last_between(day, day + 3 * 86_400 - 1, 100, &|_| 0);
        assert_eq!((last, n), (Some(day + 2 * 86_400 + 9 * 3600), 3));
        // Counting stops at the cap; the last firing is still found.
        let every = Schedule::parse("* * * * *").unwrap();
        let (last, n) = every.last_between(day, day + 86_400, 100, &|_| 0);
        assert_eq!((last, n), (Some(day + 86_400), 100));
        let (last, n) = Schedule::Every(10).last_between(day, day + 95, 100, &|_| 0);
        assert_eq!((last, n), (Some(day + 90), 9));
    }

    #[test]
    fn bad_schedules_are_refused() {
        for bad in [
            "* * * *",
            "61 * * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "5-2 * * * *",
            "@sometimes",
            "x * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }
}
