//! The config file takes every long option of `record` and `serve`, and means by each what the
//! command line means.

use std::ffi::OsString;
use std::path::Path;

use super::{keys, parse_from};

/// A value for every key, valid for its option, as TOML. A key missing here fails
/// `every_option_is_a_key_and_means_what_the_flag_means`: a new option is tried as a key.
const SAMPLES: &[(&str, &str)] = &[
    ("links", "2"),
    ("frame", "\"wibeth\""),
    ("source", "\"udp://127.0.0.1:5000\""),
    ("streams", "[0, 1]"),
    ("header_version", "\"any\""),
    ("rcvbuf", "\"8MiB\""),
    ("gro", "false"),
    ("receive_nap", "\"1ms\""),
    ("receive_batch", "4"),
    ("run", "7"),
    ("unit", "\"u1\""),
    ("source_ids", "[4, 5]"),
    ("rate_per_link", "\"5MB/s\""),
    ("buffer", "\"2s\""),
    ("pre", "\"1s\""),
    ("post", "\"1500ms\""),
    ("method", "\"direct\""),
    ("writers", "2"),
    ("chunk_frames", "64"),
    ("chunks_per_persist", "4"),
    ("cpus", "\"0,1\""),
    ("page_size", "\"4KiB\""),
    ("replay", "\"/r/x.bin\""),
    ("output", "[\"/r/a\", \"/r/b\"]"),
    ("burst_id", "\"b1\""),
    ("profile", "\"dune\""),
    ("status_file", "\"/r/s.json\""),
    ("completion_deadline", "\"5s\""),
    ("max_window", "\"30s\""),
    ("max_burst", "\"90s\""),
    ("trigger_after", "\"2s\""),
    ("json", "\"/r/r.json\""),
    ("socket", "\"/r/s.sock\""),
    ("metrics", "\"127.0.0.1:9464\""),
    ("nats", "\"nats://h1:4222,nats://h2:4222\""),
    ("nats_replicas", "3"),
    ("nats_creds", "\"/r/c.creds\""),
    ("nats_ca", "\"/r/ca.pem\""),
    ("nats_nkey", "\"/r/unit.nk\""),
    ("export_to", "\"file:///r/exp\""),
    ("export_rate", "\"10MB/s\""),
    ("export_codec", "\"frames\""),
    ("delete_after_verify", "true"),
    ("drain_timeout", "\"30s\""),
    ("log_format", "\"json\""),
];

fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

/// The sample as command-line words: `--key=value` per value, a flag alone.
fn as_flags(key: &str, toml_value: &str) -> Vec<String> {
    let long = key.replace('_', "-");
    let value: toml::Value =
        toml::from_str::<toml::Table>(&format!("v = {toml_value}")).unwrap()["v"].clone();
    let one = |v: &toml::Value| match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match &value {
        toml::Value::Boolean(true) if key == "delete_after_verify" => vec![format!("--{long}")],
        toml::Value::Array(items) => items
            .iter()
            .map(|v| format!("--{long}={}", one(v)))
            .collect(),
        v => vec![format!("--{long}={}", one(v))],
    }
}

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("unit.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn every_option_is_a_key_and_means_what_the_flag_means() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["record", "serve"] {
        let sample_keys: Vec<&str> = SAMPLES.iter().map(|(k, _)| *k).collect();
        for key in keys(command) {
            assert!(
                key == "s3" || sample_keys.contains(&key.as_str()),
                "`{command} --{}` has no sample value here: add one",
                key.replace('_', "-")
            );
        }
        for (key, value) in SAMPLES {
            if !keys(command).contains(&key.to_string()) {
                continue;
            }
            let config = write_config(dir.path(), &format!("{key} = {value}\n"));
            let from_file = parse_from(argv(&["snbuf", command, "--config", &config]))
                .unwrap_or_else(|e| panic!("{command}: {key} = {value}: {e:#}"));
            let mut words = vec!["snbuf".to_string(), command.into(), "--config".into()];
            let empty = write_config(dir.path(), "");
            words.push(empty);
            words.extend(as_flags(key, value));
            let mut flags = words.iter().map(OsString::from).collect::<Vec<_>>();
            let from_flags = parse_from(std::mem::take(&mut flags)).unwrap();
            // The two differ only in the config file's name, which is the same path.
            assert_eq!(
                format!("{from_file:?}"),
                format!("{from_flags:?}"),
                "{command}: `{key} = {value}` in the file is not what {:?} is",
                as_flags(key, value)
            );
        }
    }
}

#[test]
fn the_command_line_wins_paths_are_the_files_and_mistakes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "links = 2\nbuffer = \"2s\"\noutput = \"data\"\nstatus_file = \"s.json\"\n",
    );
    let cli = parse_from(argv(&[
        "snbuf", "record", "--config", &config, "--links", "3",
    ]))
    .unwrap();
    let crate::cli::Command::Record(a) = cli.command else {
        panic!("record");
    };
    assert_eq!(a.unit.options.links, Some(3), "the command line wins");
    assert_eq!(
        a.unit.options.buffer,
        Some(std::time::Duration::from_secs(2))
    );
    assert_eq!(a.unit.options.output, vec![dir.path().join("data")]);
    assert_eq!(a.unit.options.status_file, Some(dir.path().join("s.json")));

    for (text, needle) in [
        ("linkz = 3\n", "unknown key `linkz`"),
        ("trigger_after = \"1s\"\n", "unknown key `trigger_after`"),
        ("config = \"other.toml\"\n", "unknown key `config`"),
        ("links = \"many\"\n", "links"),
        ("buffer = \"0s\"\n", "buffer"),
        ("delete_after_verify = \"yes\"\n", "a flag"),
        ("pre = [\"1s\", \"2s\"]\n", "a list"),
        ("links = 2\nlinks = 3\n", "duplicate"),
        ("[s3]\nnot_a_setting = 1\n", "s3"),
        ("rate-per-link = \"5MB/s\"\n", "unknown key `rate-per-link`"),
        ("output = \"\"\n", "an empty value"),
        (
            "inject_fault = [\"lost-flush\"]\n",
            "`inject_fault` is taken from a command line only",
        ),
        ("unsafe_faults_for_tests = true\n", "a command line only"),
    ] {
        let config = write_config(dir.path(), text);
        let e = parse_from(argv(&["snbuf", "serve", "--config", &config]))
            .expect_err(text)
            .to_string();
        assert!(e.contains(&config), "{text}: names the file: {e}");
        assert!(e.contains(needle), "{text}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
    // An [s3] secret is never printed, however the file is wrong.
    for text in [
        "[s3]\nsecret_access_key = \"ab\\qSECRET\"\n",
        "[s3]\nsecret_access_key = 12345678\n",
        "[s3]\nsecret_access_key = \"SECRET\"\nsecret_access_key = \"SECRET\"\n",
        "s3 = \"SECRET\"\n",
    ] {
        let config = write_config(dir.path(), text);
        let e = parse_from(argv(&["snbuf", "serve", "--config", &config]))
            .expect_err(text)
            .to_string();
        assert!(!e.contains("SECRET") && !e.contains("12345678"), "{e}");
    }
    // `nats = true` is `--nats` alone (the default server); a trailing `--` changes nothing.
    let config = write_config(dir.path(), "nats = true\n");
    let cli = parse_from(argv(&["snbuf", "serve", "--config", &config, "--"])).unwrap();
    let crate::cli::Command::Serve(a) = cli.command else {
        panic!("serve");
    };
    assert_eq!(a.nats.as_deref(), Some("nats://127.0.0.1:4222"));
    // A `serve` key in a file given to `record` is not a typo: left alone.
    let config = write_config(dir.path(), "metrics = \"127.0.0.1:1\"\nlinks = 2\n");
    let cli = parse_from(argv(&["snbuf", "record", "--config", &config])).unwrap();
    let crate::cli::Command::Record(a) = cli.command else {
        panic!("record");
    };
    assert_eq!(a.unit.options.links, Some(2));
}
