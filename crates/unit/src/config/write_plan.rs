//! How the recorder writes: the persistence method and the number of writer threads, chosen
//! from the output's medium and the links when not given, each with why (for the terminal).

use std::path::Path;

use snbuf_persist::{medium, Method};

use super::options::SetupError;

/// Why the recorder writes the way it does, for the terminal and the logs.
pub struct Reasons {
    /// Why this persistence method.
    pub method: String,
    /// Why this many writer threads.
    pub writers: String,
}

/// The method and the writer threads, each with why (for the summary).
pub struct WritePlan {
    pub method: Method,
    pub why_method: String,
    pub writers: usize,
    pub why_writers: String,
}

/// `--method auto`: mapped non-temporal stores where the medium is persistent memory (DAX).
/// Elsewhere io_uring with one writer per output: that writer starts every one of its links'
/// chunks, then their flushes, before it waits for any, so one thread keeps the device as busy
/// as fio's best O_DIRECT write, for about fio's own CPU per GiB (BENCHMARKS.md: keep-up 1.02x
/// fio's best, writers 0.99x fio's CPU, against 0.78x and 1.8x for O_DIRECT with a synchronous
/// writer per link). Without io_uring (disabled, or compiled out of the kernel), O_DIRECT with
/// a writer per link, each keeping its own write in flight. With `--writers` given: O_DIRECT
/// when each writer has at most two links, else io_uring. `--writers` defaults to one per
/// output for io_uring; on memory to one per link (as in the paper) but no more than the
/// `writer_cpus` they run on (a writer there is a CPU copy: more threads than CPUs only take
/// turns, and on 2 CPUs 2 writers kept up with more than 10 for less CPU, BENCHMARKS.md); for
/// O_DIRECT to one per link, each keeping its own write in flight.
pub fn plan_writes(
    requested: &str,
    requested_writers: Option<usize>,
    output: &Path,
    links: u32,
    outputs: usize,
    writer_cpus: usize,
) -> Result<WritePlan, SetupError> {
    let per_output = outputs.clamp(1, links.max(1) as usize);
    let plan = |method: Method, why_method: String| {
        let (writers, why_writers) = match requested_writers {
            Some(w) => (w, "--writers".to_string()),
            None if method == Method::Uring => (
                per_output,
                "one io_uring writer per output, keeping all its links' writes in flight".into(),
            ),
            None if method.capabilities().mapped && writer_cpus < links as usize => (
                writer_cpus.max(per_output),
                format!(
                    "one per CPU the writers run on ({writer_cpus}), fewer than the links: \
                     each copies with the CPU, and more threads would only take turns"
                ),
            ),
            None => (
                links as usize,
                "one per link, as in the paper: each keeps its own write in flight".into(),
            ),
        };
        // `validate` refuses more writers than links: a default is never refused so.
        debug_assert!(
            requested_writers.is_some() || writers <= links.max(1) as usize,
            "no more default writers than links"
        );
        WritePlan {
            method,
            why_method,
            writers,
            why_writers,
        }
    };
    if requested != "auto" {
        let m = requested
            .parse::<Method>()
            .map_err(|e| SetupError::usage(e.to_string()))?;
        if !m.compiled_in() {
            return Err(SetupError::usage(format!(
                "method {m} is not in this build; rebuild with `--features pmdk`"
            )));
        }
        return Ok(plan(m, "chosen with --method".into()));
    }
    let m = medium::probe(output)
        .map_err(|e| SetupError::Machine(format!("probe {}: {e}", output.display())))?;
    if m.dax {
        return Ok(plan(
            Method::Nt,
            format!(
                "{} is DAX (persistent memory): non-temporal stores + fence",
                m.fs_type
            ),
        ));
    }
    let uring = snbuf_persist::backends::uring::available();
    if let Err(why) = &uring {
        return Ok(plan(
            Method::Direct,
            format!("{} is not DAX and {why}: O_DIRECT and fdatasync", m.fs_type),
        ));
    }
    match requested_writers {
        Some(w) if w * 2 >= links as usize => Ok(plan(
            Method::Direct,
            format!(
                "{} is not DAX; {w} writers for {links} links keep enough writes in flight: O_DIRECT and fdatasync",
                m.fs_type
            ),
        )),
        _ => Ok(plan(
            Method::Uring,
            format!(
                "{} is not DAX: io_uring with O_DIRECT and fdatasync, every link's writes and flushes in flight at once",
                m.fs_type
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writers(
        method: &str,
        requested: Option<usize>,
        links: u32,
        outputs: usize,
        cpus: usize,
    ) -> usize {
        plan_writes(method, requested, Path::new("."), links, outputs, cpus)
            .expect("a plan")
            .writers
    }

    #[test]
    fn default_writers_follow_the_method_and_the_cpus() {
        // io_uring: one per output, whatever the CPUs.
        assert_eq!(writers("uring", None, 10, 1, 2), 1);
        assert_eq!(writers("uring", None, 10, 2, 2), 2);
        // Memory: one per link, but no more than the CPUs they run on (at least one per output).
        assert_eq!(writers("nt", None, 10, 1, 2), 2);
        assert_eq!(writers("nt", None, 10, 3, 2), 3);
        assert_eq!(writers("nt", None, 10, 1, 64), 10);
        // O_DIRECT: one per link, each with its own write in flight.
        assert_eq!(writers("direct", None, 10, 1, 2), 10);
        // --writers wins.
        assert_eq!(writers("nt", Some(7), 10, 1, 2), 7);
    }
}
