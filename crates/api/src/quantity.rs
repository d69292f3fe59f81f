//! `resource.Quantity` strings (`100m`, `1.5`, `128Mi`, `1G`, `1e3`) as integers: milli-units
//! for CPU, whole units (bytes, pods) for everything else. Values round up, as upstream's
//! `MilliValue`/`Value` do.

/// The quantity in thousandths (`"1"` → 1000, `"250m"` → 250).
pub fn parse_milli(s: &str) -> Option<i64> {
    let (num, mult_num, mult_den) = split(s.trim())?;
    // value * 1000 * mult, rounded up.
    // Checked throughout: a quantity too large for an i64 is not a value (None), never a
    // wrapped one.
    let (int, frac) = decimal(num)?;
    let scale = 10i128.pow(frac.1);
    let v = int.checked_mul(1000)?.checked_mul(mult_num)?;
    let f = frac.0.checked_mul(1000)?.checked_mul(mult_num)?;
    let total_num = v.checked_mul(scale)?.checked_add(f)?;
    let den = scale.checked_mul(mult_den)?;
    let q = total_num.div_euclid(den) + i128::from(total_num.rem_euclid(den) != 0);
    i64::try_from(q).ok()
}

/// The quantity in whole units, rounded up (`"128Mi"` → 134217728, `"500m"` → 1).
pub fn parse_value(s: &str) -> Option<i64> {
    let m = parse_milli(s)?;
    Some(m.div_euclid(1000) + i64::from(m.rem_euclid(1000) != 0))
}

/// (number, multiplier numerator, multiplier denominator).
fn split(s: &str) -> Option<(&str, i128, i128)> {
    if s.is_empty() {
        return None;
    }
    let suffixes: [(&str, i128, i128); 14] = [
        ("Ki", 1 << 10, 1),
        ("Mi", 1 << 20, 1),
        ("Gi", 1 << 30, 1),
        ("Ti", 1 << 40, 1),
        ("Pi", 1 << 50, 1),
        ("Ei", 1 << 60, 1),
        ("n", 1, 1_000_000_000),
        ("u", 1, 1_000_000),
        ("m", 1, 1000),
        ("k", 1000, 1),
        ("M", 1_000_000, 1),
        ("G", 1_000_000_000, 1),
        ("T", 1_000_000_000_000, 1),
        ("P", 1_000_000_000_000_000, 1),
    ];
    for (suf, n, d) in suffixes {
        if let Some(num) = s.strip_suffix(suf) {
            return Some((num, n, d));
        }
    }
    if let Some(num) = s.strip_suffix('E') {
        return Some((num, 1_000_000_000_000_000_000, 1));
    }
    if let Some((num, exp)) = s.split_once(['e', 'E']) {
        let e: u32 = exp.parse().ok().filter(|e| *e <= 18)?;
        return Some((num, 10i128.pow(e), 1));
    }
    Some((s, 1, 1))
}

/// Integer part and (fraction digits as integer, number of digits).
fn decimal(s: &str) -> Option<(i128, (i128, u32))> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (i, f) = s.split_once('.').unwrap_or((s, ""));
    if (i.is_empty() && f.is_empty())
        || !i.bytes().all(|b| b.is_ascii_digit())
        || !f.bytes().all(|b| b.is_ascii_digit())
        || f.len() > 9
    {
        return None;
    }
    let int: i128 = if i.is_empty() { 0 } else { i.parse().ok()? };
    let frac: i128 = if f.is_empty() { 0 } else { f.parse().ok()? };
    let sign = if neg { -1 } else { 1 };
    Some((sign * int, (sign * frac, f.len() as u32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_forms() {
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("250m"), Some(250));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("0.1"), Some(100));
        assert_eq!(parse_value("128Mi"), Some(128 << 20));
        assert_eq!(parse_value("1G"), Some(1_000_000_000));
        assert_eq!(parse_value("1e3"), Some(1000));
        assert_eq!(parse_value("500m"), Some(1), "rounds up");
        assert_eq!(parse_value("110"), Some(110));
        assert_eq!(parse_value("1.5Gi"), Some(3 << 29));
        for bad in [
            "",
            "x",
            "1.2.3",
            "Mi",
            "1e99",
            "99999999999999999999999999999999999Ei",
            "9223372036854775807k",
            "170141183460469231731687303715884105727",
        ] {
            assert_eq!(parse_milli(bad), None, "{bad}");
        }
    }
}
