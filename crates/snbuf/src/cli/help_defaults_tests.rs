//! What `record --help` and `serve --help` say a default is, against the default the code
//! resolves: the unit's configuration made from no options at all. Every option whose help
//! speaks of a default is checked here, or named with the reason it is words only.

use std::time::Duration;

use clap::CommandFactory;
use snbuf_quantity::parse_bytes;
use snbuf_quantity::parse_duration;
use snbuf_unit::config::{from_options, UnitOptions};
use snbuf_unit::{RecordConfig, Source};

use super::Cli;

/// Options whose default is said in words that name no value of their own (a rule, another
/// option, the machine), each checked where its behaviour is.
const IN_WORDS: &[&str] = &[
    "source",        // `emulate`, the default: the config below is emulated
    "streams",       // "0,1,2,...: stream N is link N"
    "gro",           // "default on": checked below
    "unit",          // the host name: fleet_args::unit_id
    "source-ids",    // the link number
    "method",        // auto: what it picks depends on the medium (`snbuf methods`)
    "writers",       // depends on the method and the outputs
    "page-size",     // what the kernel grants
    "burst-id",      // UTC time and process id
    "socket",        // OUTPUT/snbuf.sock
    "nats-replicas", // 3 on a cluster of three or more servers: fleet tests
    "export-rate",   // none
    "log-format",    // clap's own [default: text], one source
];

/// The configuration the code makes from no options but an output (and a source, for UDP's).
fn resolved(options: UnitOptions) -> RecordConfig {
    let dir = tempfile::tempdir().unwrap();
    let options = UnitOptions {
        output: vec![dir.path().join("out")],
        unit: Some("u".into()),
        ..options
    };
    from_options(&options, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

/// The help of `--long` of `command`, on one line.
fn help(command: &str, long: &str) -> String {
    let cmd = Cli::command();
    let sub = cmd.find_subcommand(command).unwrap();
    let arg = sub
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .unwrap_or_else(|| panic!("{command} --{long}"));
    let text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The word after `marker` in `text`, without the punctuation that ends it.
fn after<'a>(text: &'a str, marker: &str) -> &'a str {
    let i = text
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` not in: {text}"));
    text[i + marker.len()..]
        .split(|c: char| c.is_whitespace() || ";,):".contains(c))
        .next()
        .unwrap()
}

/// The word before `marker` in `text`.
fn before<'a>(text: &'a str, marker: &str) -> &'a str {
    let i = text
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` not in: {text}"));
    text[..i].split_whitespace().last().unwrap()
}

fn secs(s: &str) -> Duration {
    parse_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The unit on no options (emulated), and a WIBEth network unit on no other options.
fn defaults() -> (RecordConfig, RecordConfig) {
    let udp = UnitOptions {
        source: Some("udp://127.0.0.1:0".into()),
        frame: Some("wibeth".into()),
        ..UnitOptions::default()
    };
    (resolved(UnitOptions::default()), resolved(udp))
}

#[test]
fn every_default_the_help_states_is_the_codes() {
    let (emulated, udp) = defaults();
    let h = |long: &str| help("record", long);

    assert_eq!(
        after(&h("links"), "default ").parse::<u32>(),
        Ok(emulated.links)
    );
    assert_eq!(secs(after(&h("buffer"), "default ")), emulated.buffer);
    assert_eq!(secs(after(&h("pre"), "default ")), emulated.pre);
    assert_eq!(secs(after(&h("post"), "default ")), emulated.post);
    assert_eq!(
        after(&h("chunks-per-persist"), "default ").parse::<u32>(),
        Ok(emulated.chunks_per_persist)
    );
    let mib =
        |c: &RecordConfig| c.chunk_frames as f64 * c.frame_type.frame_bytes() as f64 / 1048576.0;
    let chunk = h("chunk-frames");
    assert!(
        chunk.contains(&format!(
            "O_DIRECT: {} frames, {:.2} MiB, for protodune-wib; {}, {:.2} MiB, for wibeth",
            emulated.chunk_frames,
            mib(&emulated),
            udp.chunk_frames,
            mib(&udp)
        )),
        "{chunk}"
    );
    assert!(
        h("frame").contains("protodune-wib (5568 B superchunks, 300 ticks at 50 MHz; the default)")
    );
    assert_eq!(emulated.frame_type.to_string(), "protodune-wib");
    assert_eq!(
        (
            emulated.frame_type.frame_bytes(),
            emulated.frame_type.ticks_per_frame(),
            emulated.clock().hz()
        ),
        (5568, 300, 50_000_000)
    );
    let rate = h("rate-per-link");
    let emulated_rate = parse_bytes(before(&rate, "for the emulator").trim_end_matches("/s"));
    assert_eq!(
        emulated_rate.map(|b| b as f64),
        Ok(emulated.link_bytes_per_s().round())
    );
    let wibeth = before(&rate, "for WIBEth").trim_start_matches('(');
    assert!(
        (parse_bytes(wibeth.trim_end_matches("/s")).unwrap() as f64 / udp.link_bytes_per_s() - 1.0)
            .abs()
            < 0.001,
        "{wibeth} against {}",
        udp.link_bytes_per_s()
    );
    assert_eq!(
        secs(after(&h("max-window"), "default ")),
        emulated.max_window
    );
    // "(default: the larger of --pre and 1s, plus 1s ...)"
    assert_eq!(
        emulated.trigger_after,
        emulated.pre.max(Duration::from_secs(1)) + Duration::from_secs(1)
    );
    assert!(h("trigger-after").contains("the larger of --pre and 1s, plus 1s"));
    let short_pre = resolved(UnitOptions {
        pre: Some(Duration::from_millis(300)),
        ..UnitOptions::default()
    });
    assert_eq!(short_pre.trigger_after, Duration::from_secs(2));
    // "Default: half of --buffer, between 1s and 60s."
    assert!(h("completion-deadline").contains("half of --buffer, between 1s and 60s"));
    assert_eq!(emulated.completion_deadline, emulated.buffer / 2);
    for (buffer, deadline) in [(1, 1), (4, 2), (600, 60)] {
        let c = resolved(UnitOptions {
            buffer: Some(Duration::from_secs(buffer)),
            pre: Some(Duration::ZERO),
            ..UnitOptions::default()
        });
        assert_eq!(c.completion_deadline, Duration::from_secs(deadline));
    }
}

#[test]
fn every_network_and_service_default_the_help_states_is_the_codes() {
    let (emulated, udp) = defaults();
    let Source::Udp(ref u) = udp.source else {
        panic!("udp")
    };
    let h = |long: &str| help("record", long);
    assert_eq!(
        parse_bytes(after(&h("rcvbuf"), "default ")).map(|b| b as usize),
        Ok(u.rcvbuf_bytes)
    );
    assert_eq!(secs(after(&h("receive-nap"), "the default: ")), u.max_nap);
    assert_eq!(
        after(&h("receive-batch"), "default ").parse::<usize>().ok(),
        Some(u.max_buffers_per_call)
    );
    assert_eq!(
        after(&h("header-version"), "Default ").parse::<u8>().ok(),
        u.header_version
    );
    assert!(h("gro").contains("default on") && u.gro);
    assert!(h("output").contains(&format!("default {}", snbuf_unit::config::DEFAULT_OUTPUT)));
    assert!(help("serve", "nats").contains(super::record::DEFAULT_NATS));
    assert!(help("serve", "drain-timeout")
        .contains("default: --max-burst + --max-window + 3 x --buffer + 30 s"));
    assert_eq!(
        snbuf_service::policy::default_drain_timeout(&emulated),
        emulated.max_burst + emulated.max_window + 3 * emulated.buffer + Duration::from_secs(30)
    );
    assert!(help("serve", "max-burst").contains("default: twice --max-window"));
    assert_eq!(emulated.max_burst, 2 * emulated.max_window);
}

#[test]
fn every_option_that_states_a_default_is_checked_here() {
    // Every option that speaks of a default is one of the above, or said in words.
    let checked = [
        "links",
        "buffer",
        "pre",
        "post",
        "chunks-per-persist",
        "chunk-frames",
        "rate-per-link",
        "trigger-after",
        "completion-deadline",
        "rcvbuf",
        "receive-nap",
        "receive-batch",
        "header-version",
        "gro",
        "output",
        "nats",
        "drain-timeout",
        "frame",
        "max-window",
        "max-burst",
    ];
    for command in ["record", "serve"] {
        let cmd = Cli::command();
        for arg in cmd.find_subcommand(command).unwrap().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let text = help(command, long).to_lowercase();
            if text.contains("default") {
                assert!(
                    checked.contains(&long) || IN_WORDS.contains(&long),
                    "`{command} --{long}` states a default this test does not check: {text}"
                );
            }
        }
    }
}
