//! Wall-clock time as snbuf records it: nanoseconds since the Unix epoch (machine-readable,
//! in manifests and messages) and a compact UTC stamp (for burst ids a person can sort).

/// Nanoseconds since the Unix epoch now (0 if the clock is before it).
pub fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `20261121T233500Z`: `unix_s` seconds since the epoch as a UTC date and time.
pub fn utc_stamp(unix_s: u64) -> String {
    let (days, rem) = ((unix_s / 86_400) as i64, unix_s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_time() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.
        assert_eq!(utc_stamp(951_827_696), "20000229T123456Z");
        assert_eq!(utc_stamp(1_795_300_000), "20261121T222640Z");
        assert!(now_unix_ns() > 1_700_000_000_000_000_000);
    }
}
