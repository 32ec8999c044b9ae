//! snbuf-quantity: sizes, rates and durations in human units; command-line values; wall-clock stamps.
//!
//! Everything snbuf prints or parses goes through here so that `4k`, `4KiB` and `4096` mean the
//! same thing on every command line, and every figure on the terminal reads the same way
//! (`9.8 GiB/s`, `5568 B`, `1.5 s`). Machine-readable output never uses these strings: it keeps
//! raw integers with the unit in the field name.
//!
//! Convention: `k`, `m`, `g`, `t` and `KiB`… are binary (1024) multiples, because block and
//! buffer sizes are; `kB`, `MB`, `GB`, `TB` are decimal (1000) because link rates are quoted in
//! decimal units (a ProtoDUNE link is 0.93 GB/s).

#![forbid(unsafe_code)]

pub mod time;
pub mod values;

pub use time::{now_unix_ns, utc_stamp};

use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum QuantityError {
    #[error("empty value")]
    Empty,
    #[error("'{0}' is not a number with an optional unit")]
    NotANumber(String),
    #[error("unknown unit '{unit}' in '{input}'")]
    UnknownUnit { input: String, unit: String },
    #[error("'{0}' is too large")]
    Overflow(String),
}

/// Parses a byte size: `5568`, `4k`, `4KiB`, `1MiB`, `2M`, `1.5GiB`, `10GB`.
pub fn parse_bytes(input: &str) -> Result<u64, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (number, unit) = split_number(s)?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(QuantityError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    let value = number * multiplier;
    if !value.is_finite() || value >= u64::MAX as f64 {
        return Err(QuantityError::Overflow(input.to_string()));
    }
    Ok(value.round() as u64)
}

/// Parses a rate in bytes per second: `1GB/s`, `930MB/s`, `2GiB/s`, `100M` (the `/s` is optional).
pub fn parse_rate_bytes_per_s(input: &str) -> Result<u64, QuantityError> {
    let s = input.trim();
    let s = s.strip_suffix("/s").unwrap_or(s);
    parse_bytes(s)
}

/// Parses a duration: `2s`, `500ms`, `100us`, `1.5s`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(input: &str) -> Result<Duration, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (number, unit) = split_number(s)?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "ns" => number / 1e9,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86_400.0,
        _ => {
            return Err(QuantityError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| QuantityError::Overflow(input.to_string()))
}

fn split_number(s: &str) -> Result<(f64, &str), QuantityError> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(end);
    let number: f64 = digits
        .parse()
        .map_err(|_| QuantityError::NotANumber(s.to_string()))?;
    Ok((number, unit.trim()))
}

/// A byte count printed in binary units: `5568 B`, `4.0 KiB`, `1.0 MiB`, `9.81 GiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        let n = self.0;
        // Exact multiples read best without decimals (4 KiB, 1 MiB); odd sizes such as the
        // 5568 B superchunk are clearer in bytes than as 5.44 KiB.
        if n < 1024 || (n < 1024 * 1024 && !n.is_multiple_of(1024)) {
            return write!(f, "{n} B");
        }
        let mut value = n as f64;
        let mut unit = 0;
        value /= 1024.0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if value.fract() == 0.0 {
            write!(f, "{} {}", value as u64, UNITS[unit])
        } else {
            write!(
                f,
                "{:.prec$} {}",
                value,
                UNITS[unit],
                prec = precision(value)
            )
        }
    }
}

/// A rate in bytes per second printed in binary units: `9.81 GiB/s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"];
        let mut value = self.0.max(0.0);
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(
            f,
            "{:.prec$} {}",
            value,
            UNITS[unit],
            prec = precision(value)
        )
    }
}

/// A duration in nanoseconds printed with a unit that keeps 3 significant digits: `812 ns`,
/// `12.4 µs`, `3.10 ms`, `1.50 s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nanos(pub u64);

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        let (value, unit) = if n < 1e3 {
            return write!(f, "{} ns", self.0);
        } else if n < 1e6 {
            (n / 1e3, "µs")
        } else if n < 1e9 {
            (n / 1e6, "ms")
        } else {
            (n / 1e9, "s")
        };
        write!(f, "{:.prec$} {}", value, unit, prec = precision(value))
    }
}

/// A count printed with an SI suffix: `212.5 k`, `1.20 M`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Count(pub f64);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let (value, unit) = if n < 1e3 {
            (n, "")
        } else if n < 1e6 {
            (n / 1e3, " k")
        } else if n < 1e9 {
            (n / 1e6, " M")
        } else {
            (n / 1e9, " G")
        };
        write!(f, "{:.prec$}{}", value, unit, prec = precision(value))
    }
}

/// Three significant digits for values printed with a unit.
fn precision(value: f64) -> usize {
    if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_the_spellings_the_cli_documents() {
        assert_eq!(parse_bytes("256").unwrap(), 256);
        assert_eq!(parse_bytes("4k").unwrap(), 4096);
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("4K").unwrap(), 4096);
        assert_eq!(parse_bytes("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("5568").unwrap(), 5568);
        assert_eq!(parse_bytes("5568B").unwrap(), 5568);
        assert_eq!(parse_bytes("10GB").unwrap(), 10_000_000_000);
        assert_eq!(parse_bytes(" 64KiB ").unwrap(), 65536);
    }

    #[test]
    fn bad_sizes_are_errors_not_zero() {
        assert_eq!(parse_bytes(""), Err(QuantityError::Empty));
        assert!(matches!(
            parse_bytes("abc"),
            Err(QuantityError::NotANumber(_))
        ));
        assert!(matches!(
            parse_bytes("-4k"),
            Err(QuantityError::NotANumber(_))
        ));
        assert!(matches!(
            parse_bytes("4XB"),
            Err(QuantityError::UnknownUnit { .. })
        ));
        assert!(parse_bytes("1e30").is_err());
        assert!(matches!(
            parse_bytes("99999999999TiB"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn rates_and_durations_parse() {
        assert_eq!(parse_rate_bytes_per_s("1GB/s").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate_bytes_per_s("930MB/s").unwrap(), 930_000_000);
        assert_eq!(parse_rate_bytes_per_s("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("2 fortnights").is_err());
    }

    #[test]
    fn human_output_reads_naturally() {
        assert_eq!(Bytes(5568).to_string(), "5568 B");
        assert_eq!(Bytes(256).to_string(), "256 B");
        assert_eq!(Bytes(4096).to_string(), "4 KiB");
        assert_eq!(Bytes(1 << 20).to_string(), "1 MiB");
        assert_eq!(Bytes(3 << 29).to_string(), "1.50 GiB");
        assert_eq!(Rate(9.81 * (1u64 << 30) as f64).to_string(), "9.81 GiB/s");
        assert_eq!(Nanos(812).to_string(), "812 ns");
        assert_eq!(Nanos(12_400).to_string(), "12.4 µs");
        assert_eq!(Count(212_400.0).to_string(), "212 k");
    }
}
