//! Command-line values beyond plain sizes, rates and durations: a size or duration that must
//! not be zero, a row count (`4M`), a thread count, a page size. Each refuses bad input with a
//! typed error whose message names what was wrong; clap takes these functions as value parsers.

use std::path::Path;
use std::time::Duration;

use crate::{parse_bytes, parse_duration, QuantityError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Unit(#[from] QuantityError),
    #[error("must be more than 0")]
    Zero,
    #[error("must be more than 0 bytes")]
    ZeroBytes,
    #[error("'{0}' is not a count (examples: 1000000, 4M, 4Mi)")]
    NotACount(String),
    #[error("'{0}' is too large")]
    TooLarge(String),
    #[error("'{0}' is not a whole number")]
    NotAWholeNumber(String),
    #[error("must be at least 1")]
    NoThreads,
    #[error("more than {MAX_THREADS} threads is not a sensible point")]
    TooManyThreads,
    #[error("page size must be 4KiB or 2MiB")]
    PageSize,
    #[error("'{0}': on or off")]
    NotOnOff(String),
    #[error("{flag} {path}: {parent} is not a directory")]
    NoParentDir {
        flag: String,
        path: String,
        parent: String,
    },
}

/// A file a command will write must have somewhere to go: its directory exists (checked now,
/// not after a run). `flag` names the option, for the message.
pub fn check_parent_dir(flag: &str, path: &Path) -> Result<(), ValueError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(ValueError::NoParentDir {
            flag: flag.into(),
            path: path.display().to_string(),
            parent: parent.display().to_string(),
        });
    }
    Ok(())
}

/// The most threads a benchmark point may ask for.
pub const MAX_THREADS: usize = 4096;

/// A switch: `on` or `off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
pub fn parse_on_off(s: &str) -> Result<bool, ValueError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(ValueError::NotOnOff(s.to_string())),
    }
}

/// A byte size that is more than 0.
pub fn parse_size_nonzero(s: &str) -> Result<u64, ValueError> {
    match parse_bytes(s)? {
        0 => Err(ValueError::ZeroBytes),
        n => Ok(n),
    }
}

/// A duration that is more than 0.
pub fn parse_duration_nonzero(s: &str) -> Result<Duration, ValueError> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(ValueError::Zero),
        d => Ok(d),
    }
}

/// A row count: 4000000, 4M (10^6), 4Mi (2^20), 4K (10^3), 4Ki (2^10).
pub fn parse_count(s: &str) -> Result<u64, ValueError> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("Mi") {
        (n, 1u64 << 20)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix("Ki") {
        (n, 1 << 10)
    } else if let Some(n) = t.strip_suffix('K').or_else(|| t.strip_suffix('k')) {
        (n, 1000)
    } else {
        (t, 1)
    };
    match num.parse::<u64>() {
        Ok(0) => Err(ValueError::Zero),
        Ok(n) => n
            .checked_mul(mult)
            .ok_or_else(|| ValueError::TooLarge(s.to_string())),
        Err(_) => Err(ValueError::NotACount(s.to_string())),
    }
}

/// A thread count from 1 to `MAX_THREADS`.
pub fn parse_threads(s: &str) -> Result<usize, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(ValueError::NoThreads),
        Ok(n) if n > MAX_THREADS => Err(ValueError::TooManyThreads),
        Ok(n) => Ok(n),
        Err(_) => Err(ValueError::NotAWholeNumber(s.to_string())),
    }
}

/// A page size in bytes: 4KiB or 2MiB, the two a mapping can ask for.
pub fn parse_page_size(s: &str) -> Result<u64, ValueError> {
    match parse_bytes(s)? {
        n @ (4096 | 2097152) => Ok(n),
        _ => Err(ValueError::PageSize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_values_parse_and_refuse() {
        assert_eq!(parse_count("4M"), Ok(4_000_000));
        assert_eq!(parse_count("4Mi"), Ok(4 << 20));
        assert_eq!(parse_count("3k"), Ok(3000));
        assert_eq!(parse_count("0"), Err(ValueError::Zero));
        assert!(matches!(parse_count("x"), Err(ValueError::NotACount(_))));
        assert!(matches!(
            parse_count("99999999999999999Mi"),
            Err(ValueError::TooLarge(_))
        ));
        assert_eq!(parse_threads("8"), Ok(8));
        assert_eq!(parse_threads("0"), Err(ValueError::NoThreads));
        assert_eq!(parse_threads("5000"), Err(ValueError::TooManyThreads));
        assert_eq!(parse_page_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_page_size("8KiB"), Err(ValueError::PageSize));
        assert_eq!(parse_size_nonzero("0"), Err(ValueError::ZeroBytes));
        assert_eq!(parse_duration_nonzero("0s"), Err(ValueError::Zero));
        assert_eq!(
            parse_duration_nonzero("2s"),
            Ok(std::time::Duration::from_secs(2))
        );
    }
}
