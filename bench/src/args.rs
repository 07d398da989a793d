//! Values of bench's options, checked as clap parses them: a count below its floor, a size
//! beyond what one run can hold or seconds that are not a finite positive number are refused
//! in one line, never clamped to something the user did not ask for.

/// Largest message size measured: a ping-pong holds a few buffers of each size at once, and a
/// larger one is a typing mistake more often than a measurement.
pub(crate) const MAX_SIZE: usize = 1 << 30;

/// Longest idle stretch `bench idle` measures (a day).
const MAX_SECS: f64 = 86_400.0;

/// A message size in bytes, 0 to [`MAX_SIZE`].
pub(crate) fn size(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n > MAX_SIZE {
        return Err(format!(
            "{n} bytes is more than bench measures ({MAX_SIZE})"
        ));
    }
    Ok(n)
}

/// A count of at least 1.
pub(crate) fn count(s: &str) -> Result<usize, String> {
    at_least(s, 1)
}

/// A count of at least 1, as a `u64`.
pub(crate) fn count64(s: &str) -> Result<u64, String> {
    at_least(s, 1).map(|n| n as u64)
}

/// A count of at least 10 (a median of fewer round trips says little).
pub(crate) fn count10(s: &str) -> Result<usize, String> {
    at_least(s, 10)
}

fn at_least(s: &str, floor: usize) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n < floor {
        return Err(format!("takes at least {floor}"));
    }
    Ok(n)
}

/// Seconds: finite, above 0, at most a day.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(x.is_finite() && x > 0.0 && x <= MAX_SECS) {
        return Err(format!("takes seconds above 0 and at most {MAX_SECS}"));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused_not_clamped() {
        assert_eq!(size("8"), Ok(8));
        assert!(size(&(MAX_SIZE + 1).to_string()).is_err());
        assert!(size("18446744073709551615").is_err());
        assert!(count("0").is_err());
        assert_eq!(count("3"), Ok(3));
        assert!(count64("-1").is_err());
        assert!(count10("9").is_err());
        assert_eq!(count10("10"), Ok(10));
        for bad in ["0", "-1", "inf", "nan", "1e9", "x"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(0.5));
    }
}
