//! From options to a unit's configuration: defaults (the DUNE profile's and the laptop's),
//! the source (emulated, replayed or UDP), the write plan, and every check of the options,
//! before anything runs. The command line only parses and calls this.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use snbuf_persist::fault::FaultPlan;
use snbuf_persist::{medium, PageSize, SyncMode};
use snbuf_platform::cpu;
use snbuf_readout::{FrameType, Payload};

use super::options::{SetupError, UnitOptions};
use super::write_plan::{plan_writes, Reasons, WritePlan};
use super::{RecordConfig, Source};

/// Where bursts go without `--output`: beside wherever the unit runs, so a first try on a laptop
/// needs no option.
pub const DEFAULT_OUTPUT: &str = "./snbuf-data";

/// The recorder's configuration from `args` (the command line and its config file) and, for
/// `record`, when its trigger fires. Refuses bad input before anything runs, and then leaves
/// nothing behind: an output directory it had to create for probing the medium is removed again.
pub fn from_options(
    args: &UnitOptions,
    trigger_after: Option<Duration>,
) -> Result<(RecordConfig, Reasons), SetupError> {
    let outputs = if args.output.is_empty() {
        vec![PathBuf::from(DEFAULT_OUTPUT)]
    } else {
        args.output.clone()
    };
    assert!(!outputs.is_empty(), "a unit writes somewhere");
    if let Some(path) = &args.status_file {
        check_parent_dir("--status-file", path)?;
    }
    let mut created = Vec::new();
    let mut result = Ok(());
    for output in &outputs {
        if !output.exists() {
            created.push(output.clone());
        }
        if let Err(e) = std::fs::create_dir_all(output) {
            result = Err(SetupError::usage(format!(
                "--output {}: {e}",
                output.display()
            )));
            break;
        }
    }
    let result = result
        .and_then(|()| distinct_outputs(&outputs))
        .and_then(|()| build_config(args, trigger_after, outputs.clone()));
    if result.is_err() {
        for output in created.iter().rev() {
            let _ = std::fs::remove_dir(output);
        }
    }
    result
}

/// Two outputs that are one directory would put two links' files in one place and count its
/// space twice: refused.
fn distinct_outputs(outputs: &[PathBuf]) -> Result<(), SetupError> {
    let mut seen = Vec::new();
    for o in outputs {
        let real = std::fs::canonicalize(o)
            .map_err(|e| SetupError::usage(format!("--output {}: {e}", o.display())))?;
        if seen.contains(&real) {
            return Err(SetupError::usage(format!(
                "--output {} is given twice (as {})",
                o.display(),
                real.display()
            )));
        }
        seen.push(real);
    }
    debug_assert_eq!(
        seen.len(),
        outputs.len(),
        "every output is its own directory"
    );
    Ok(())
}

/// The profile, the frame type and the rate per link: the options every other default
/// depends on. The paper's unit (`--profile dune`): 10 links at the detector's own rate, 10 s
/// buffer, 100 s after the trigger. A network or replayed stream of a DUNE frame type runs at
/// the type's own rate, so its buffer holds `--buffer` seconds of real data; the emulator on
/// defaults is a sub-sampled detector at 20 MB/s a link, which a laptop's disk keeps up with.
fn stream_of(args: &UnitOptions) -> Result<(bool, FrameType, f64), SetupError> {
    let dune = args.profile.as_deref() == Some("dune");
    if let Some(p) = args.profile.as_deref().filter(|p| *p != "dune") {
        return Err(SetupError::usage(format!(
            "unknown profile '{p}' (known: dune)"
        )));
    }
    let frame_type: FrameType = args
        .frame
        .as_deref()
        .unwrap_or("protodune-wib")
        .parse()
        .map_err(|e: snbuf_frames::FrameTypeError| SetupError::usage(e.to_string()))?;
    let real_stream =
        args.source.as_deref().is_some_and(|s| s != "emulate") || args.replay.is_some();
    let dune_type = frame_type.fragment_type().is_some();
    let rate_bytes_per_s = match (&args.rate_per_link, dune || (real_stream && dune_type)) {
        (Some(r), _) => snbuf_quantity::parse_rate_bytes_per_s(r)
            .map_err(|e| SetupError::usage(format!("--rate-per-link: {e}")))?
            as f64,
        (None, true) => frame_type.native_bytes_per_s(),
        (None, false) => 20e6,
    };
    if rate_bytes_per_s <= 0.0 {
        return Err(SetupError::usage("--rate-per-link must be more than 0"));
    }
    assert!(
        rate_bytes_per_s.is_finite(),
        "a rate of some bytes a second"
    );
    Ok((dune, frame_type, rate_bytes_per_s))
}

/// The options resolved in dependency order (profile, frame type, rate, times, CPUs, write
/// plan, source), each default depending on those before it.
fn build_config(
    args: &UnitOptions,
    trigger_after: Option<Duration>,
    mut outputs: Vec<PathBuf>,
) -> Result<(RecordConfig, Reasons), SetupError> {
    let output = outputs.remove(0);
    let more_outputs = outputs;
    let (dune, frame_type, rate_bytes_per_s) = stream_of(args)?;
    let fb = frame_type.frame_bytes() as f64;
    let pick = |v: Option<Duration>, dune_v: u64, default: Duration| {
        v.unwrap_or(if dune {
            Duration::from_secs(dune_v)
        } else {
            default
        })
    };
    let buffer = pick(args.buffer, 10, Duration::from_secs(3));
    let max_window = args.max_window.unwrap_or(super::DEFAULT_MAX_WINDOW);
    let pre = pick(args.pre, 10, Duration::from_secs(2));
    let post = pick(args.post, 100, Duration::from_secs(3));
    let cpus = match &args.cpus {
        Some(list) => cpu::parse_cpu_list(list).map_err(|e| SetupError::usage(e.to_string()))?,
        None => cpu::allowed_cpus(),
    };
    let links = args.links.unwrap_or(10);
    let WritePlan {
        method,
        why_method: why,
        writers,
        why_writers,
    } = plan_writes(
        args.method.as_deref().unwrap_or("auto"),
        args.writers,
        &output,
        links,
        1 + more_outputs.len(),
        cpus.len(),
    )?;
    if args.method.as_deref().unwrap_or("auto") == "auto" {
        one_kind_of_medium(&output, &more_outputs)?;
    }
    let frames_per_s = rate_bytes_per_s / fb;
    assert!(
        frames_per_s > 0.0 && frames_per_s.is_finite(),
        "a rate of some frames a second"
    );
    let source = source_from_options(args, frame_type, links)?;
    let chunk_frames = args
        .chunk_frames
        .unwrap_or_else(|| crate::chunk_cuts::default_chunk_frames(fb as u64));
    let config = RecordConfig {
        frame_type,
        links,
        frames_per_s_per_link: frames_per_s,
        buffer,
        pre,
        post,
        trigger_after: trigger_after
            .unwrap_or(pre.max(Duration::from_secs(1)) + Duration::from_secs(1))
            .max(pre),
        method,
        sync_mode: SyncMode::Fdatasync,
        output_dir: output,
        more_outputs,
        burst_id: args.burst_id.clone().unwrap_or_else(default_burst_id),
        writers,
        cpus,
        // Huge pages unless asked otherwise: the writers and links walk the rings sequentially
        // (measured: 20% less CPU for the whole recorder on io_uring, BENCHMARKS.md); where the
        // kernel grants none, the rings get 4 KiB pages and the summary says so.
        page_size: if args.page_size == Some(4 << 10) {
            PageSize::Small4K
        } else {
            PageSize::Huge2M
        },
        chunk_frames,
        chunks_per_persist: args.chunks_per_persist.unwrap_or(8),
        source,
        run_number: args.run,
        unit_id: args.unit.clone(),
        source_ids: args.source_ids.clone(),
        status_file: args.status_file.clone(),
        faults: faults_of(args)?,
        max_window,
        max_burst: args.max_burst.unwrap_or(2 * max_window),
        completion_deadline: args
            .completion_deadline
            .unwrap_or(snbuf_persist::sink::completion_deadline_for_buffer(buffer)),
    };
    config
        .validate()
        .map_err(|e| SetupError::usage(e.to_string()))?;
    Ok((
        config,
        Reasons {
            method: why,
            writers: why_writers,
        },
    ))
}

/// A burst's name when none is given: UTC time and process id, unique on the machine.
fn default_burst_id() -> String {
    let id = format!(
        "{}-{}",
        snbuf_quantity::utc_stamp(snbuf_quantity::now_unix_ns() / 1_000_000_000),
        std::process::id()
    );
    debug_assert!(
        snbuf_burst::check_burst_id(&id).is_ok(),
        "a default burst id is a valid one: {id}"
    );
    id
}

/// The faults `--inject-fault` asks for, each parsed.
fn faults_of(args: &UnitOptions) -> Result<Vec<FaultPlan>, SetupError> {
    let faults = args
        .inject_fault
        .iter()
        .map(|f| FaultPlan::parse(f).map_err(|e| SetupError::usage(format!("--inject-fault: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(f) = faults.iter().find(|f| f.kind.voids_durability()) {
        if !args.unsafe_faults_for_tests {
            return Err(SetupError::usage(format!(
                "--inject-fault {f} makes the unit acknowledge data that is not durable; it is for the power-cut trials only: add --unsafe-faults-for-tests to ask for it"
            )));
        }
    }
    if !faults.is_empty() {
        let said: Vec<String> = faults.iter().map(|f| f.to_string()).collect();
        tracing::warn!(
            "FAULTS INJECTED ({}): for reliability tests; every burst recorded says so in its manifest",
            said.join(", ")
        );
    }
    Ok(faults)
}

/// One method serves every output: `auto` picks it from the home's medium, which is only right
/// if the others are the same kind.
fn one_kind_of_medium(home: &Path, more_outputs: &[PathBuf]) -> Result<(), SetupError> {
    let dax = |o: &Path| medium::probe(o).map(|m| m.dax).unwrap_or(false);
    if let Some(other) = more_outputs.iter().find(|o| dax(o) != dax(home)) {
        return Err(SetupError::usage(format!(
            "--output {} and {} are different kinds of media (DAX and not): choose --method",
            home.display(),
            other.display()
        )));
    }
    Ok(())
}

/// Where the links' frames come from: emulated (or replayed), or the network.
fn source_from_options(
    args: &UnitOptions,
    frame_type: FrameType,
    links: u32,
) -> Result<Source, SetupError> {
    let spec = args.source.as_deref().unwrap_or("emulate");
    let udp_only = [
        ("--streams", !args.streams.is_empty()),
        ("--header-version", args.header_version.is_some()),
        ("--rcvbuf", args.rcvbuf.is_some()),
        ("--gro", args.gro.is_some()),
        ("--receive-nap", args.receive_nap.is_some()),
        ("--receive-batch", args.receive_batch.is_some()),
    ];
    if spec == "emulate" {
        if let Some((flag, _)) = udp_only.iter().find(|(_, given)| *given) {
            return Err(SetupError::usage(format!(
                "{flag} needs --source udp://ADDR:PORT"
            )));
        }
        let payload = match &args.replay {
            Some(path) => {
                let data = std::fs::read(path)
                    .map_err(|e| SetupError::usage(format!("--replay {}: {e}", path.display())))?;
                let p = Payload::Replay(Arc::new(data));
                // Refused now (empty, not whole frames of this type), not at the links' start.
                snbuf_readout::FrameGen::new(frame_type, 0, &p)
                    .map_err(|e| SetupError::usage(format!("--replay {}: {e}", path.display())))?;
                p
            }
            None => Payload::Emulated,
        };
        return Ok(Source::Emulated { payload });
    }
    if args.gro == Some(false) && args.receive_batch.is_some() {
        return Err(SetupError::usage(
            "--receive-batch takes coalesced buffers, which --gro off turns off: without GRO each receive call takes a batch of datagrams already",
        ));
    }
    let Some(addr) = spec.strip_prefix("udp://") else {
        return Err(SetupError::usage(format!(
            "--source '{spec}': expected `emulate` or udp://ADDR:PORT"
        )));
    };
    if args.replay.is_some() {
        return Err(SetupError::usage("--replay goes with --source emulate (snbuf emit --replay sends a recording over the network)"));
    }
    let bind: std::net::SocketAddr = addr.parse().map_err(|_| {
        SetupError::usage(format!(
            "--source {spec}: '{addr}' is not ADDR:PORT (127.0.0.1:5000, [::]:5000)"
        ))
    })?;
    let routes = if args.streams.is_empty() {
        snbuf_readout::udp::UdpSource::default_routes(links)
    } else if args.streams.len() != links as usize {
        return Err(SetupError::usage(format!(
            "--streams gives {} stream(s) for {links} link(s): one per link",
            args.streams.len()
        )));
    } else {
        args.streams.iter().copied().zip(0..links).collect()
    };
    debug_assert_eq!(routes.len(), links as usize, "a stream per link");
    let header_version = match args.header_version.as_deref() {
        None => Some(snbuf_readout::framegen::EMULATED_HEADER_VERSION),
        Some("any") => None,
        Some(v) => Some(v.parse::<u8>().ok().filter(|v| *v < 64).ok_or_else(|| {
            SetupError::usage(format!("--header-version '{v}': 0 to 63, or any"))
        })?),
    };
    debug_assert!(
        header_version.is_none_or(|v| v < 64),
        "a header version fits 6 bits"
    );
    Ok(Source::Udp(snbuf_readout::udp::UdpSource {
        bind,
        routes,
        header_version,
        rcvbuf_bytes: args.rcvbuf.unwrap_or(16 << 20) as usize,
        gro: args.gro.unwrap_or(true),
        max_nap: args
            .receive_nap
            .unwrap_or(snbuf_readout::udp::DEFAULT_MAX_NAP),
        max_buffers_per_call: args
            .receive_batch
            .map_or(snbuf_readout::udp::DEFAULT_RECEIVE_BATCH, |n| n as usize),
    }))
}

/// A file the unit will write must have somewhere to go: refused now, not after a run.
pub fn check_parent_dir(flag: &str, path: &Path) -> Result<(), SetupError> {
    snbuf_quantity::values::check_parent_dir(flag, path)
        .map_err(|e| SetupError::usage(e.to_string()))
}
