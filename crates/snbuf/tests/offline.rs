//! A burst for its readers, through the real binary: `extract` (a link's frames as DUNE's raw
//! recording, replayable), `inspect` (chunk headers and decoded frame headers), and, built with
//! `--features hdf5`, `convert --to dune-hdf5` read back by h5py (Python, not snbuf): every
//! attribute, group and dataset name, the FragmentHeader fields, and the frames byte-identical
//! to the burst's; a burst with loss converts with the loss marked.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_refused, small_recording, snbuf, snbuf_owned};
use serde_json::Value;
use snbuf_burst::{ChunkHeader, HEADER_BYTES};

/// A small recorded burst of WIBEth frames (2 links), with run and unit; `extra` options added.
fn burst(dir: &Path, id: &str, extra: &[(&str, &str)]) -> PathBuf {
    let mut opts = vec![
        ("--frame", "wibeth"),
        ("--rate-per-link", "20MB/s"),
        ("--run", "1234"),
        ("--unit", "apa1"),
        ("--chunk-frames", "64"),
    ];
    opts.extend_from_slice(extra);
    let o = snbuf_owned(&small_recording(dir, id, &opts));
    assert!(o.status.success(), "{}", common::stderr(&o));
    dir.join(id)
}

/// The frames of a link file, back to back, read with the chunk scanner.
fn frames_of(burst: &Path, link: u32) -> Vec<u8> {
    common::link_frames(burst, link)
}

/// `snbuf extract` of link 1 of `burst` into `out`, with `extra` options.
fn extract_link_1(burst: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "extract",
        burst.to_str().unwrap(),
        "--link",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    snbuf(&args)
}

#[test]
fn extract_writes_a_links_frames_as_dunes_raw_recording_and_record_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = burst(dir.path(), "b", &[]);
    let out = dir.path().join("link1.bin");
    let o = extract_link_1(&b, &out, &[]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let bin = std::fs::read(&out).unwrap();
    assert_eq!(
        bin,
        frames_of(&b, 1),
        "the link's frames, unchanged, back to back"
    );
    assert!(!bin.is_empty() && bin.len().is_multiple_of(7200));
    // A time range: only the frames inside it.
    let layout = snbuf_frames::FrameType::WibEth.layout();
    let ts: Vec<u64> = bin
        .chunks_exact(7200)
        .map(|f| layout.timestamp(f))
        .collect();
    let (from, to) = (ts[10], ts[20]);
    let part = dir.path().join("part.bin");
    let o = extract_link_1(
        &b,
        &part,
        &["--from", &from.to_string(), "--to", &to.to_string()],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(std::fs::read(&part).unwrap(), bin[10 * 7200..20 * 7200]);
    // DUNE's raw recording is what `record --replay` reads.
    let o = snbuf_owned(&small_recording(
        dir.path(),
        "replayed",
        &[
            ("--frame", "wibeth"),
            ("--links", "1"),
            ("--replay", out.to_str().unwrap()),
        ],
    ));
    assert!(o.status.success(), "{}", common::stderr(&o));
    // Bad input: one line, exit 2, nothing written.
    let s = b.to_str().unwrap();
    let not_burst = dir.path().to_str().unwrap();
    let new = dir.path().join("new.bin");
    let n = new.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["extract", not_burst, "--link", "0", "--out", n],
            "burst",
        ),
        (vec!["extract", s, "--link", "9", "--out", n], "no link 9"),
        (
            vec!["extract", s, "--link", "0", "--out", out.to_str().unwrap()],
            "exists",
        ),
        (
            vec!["extract", s, "--link", "0", "--out", "/nonexistent/x.bin"],
            "directory",
        ),
        (
            vec![
                "extract", s, "--link", "0", "--out", n, "--from", "5", "--to", "5",
            ],
            "--from",
        ),
        // The README's old example: ticks from the start of the clock match nothing, and an
        // empty file with exit 0 would look like a success.
        (
            vec![
                "extract", s, "--link", "0", "--out", n, "--from", "1000", "--to", "9000",
            ],
            "no frame with a timestamp in [1000, 9000)",
        ),
    ] {
        assert_refused(&snbuf(&args), 2, needle);
        assert!(!new.exists(), "{args:?} wrote nothing");
    }
    assert_eq!(
        std::fs::read(&out).unwrap(),
        bin,
        "an existing file is left alone"
    );
}

#[test]
fn inspect_shows_chunk_headers_and_decoded_frame_headers() {
    let dir = tempfile::tempdir().unwrap();
    let b = burst(dir.path(), "b", &[]);
    let s = b.to_str().unwrap();
    let o = snbuf(&["inspect", s]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("wibeth") && text.contains("run 1234") && text.contains("unit apa1"));
    assert!(
        text.contains("link 0") && text.contains("link 1") && text.contains(" ok"),
        "{text}"
    );
    let o = snbuf(&[
        "inspect", s, "--link", "1", "--chunk", "2", "--frames", "--json",
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let links = v["links"].as_array().unwrap();
    assert_eq!(links.len(), 1);
    let chunks = links[0]["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0]["sequence"], 2);
    assert_eq!(chunks[0]["crc"], "ok");
    let frames = chunks[0]["frames"].as_array().unwrap();
    assert_eq!(
        frames.len() as u64,
        chunks[0]["frame_count"].as_u64().unwrap()
    );
    // The emulator at 20 MB/s is a sub-sampled WIBEth link: one frame every `step` ticks of the
    // 62.5 MHz clock, and the sequence number counts the frames it sends.
    let step = snbuf_burst::Manifest::read(&b)
        .unwrap()
        .frame
        .unwrap()
        .step_ticks();
    assert_eq!(step, (62_500_000.0_f64 / (20e6 / 7200.0)).round() as u64);
    for (k, f) in frames.iter().enumerate() {
        assert_eq!(f["stream_id"], 1, "link 1 sends stream 1");
        let ts = f["timestamp"].as_u64().unwrap();
        assert_eq!(f["seq_id"].as_u64().unwrap(), (ts / step) % 4096);
        if k == 0 {
            assert_eq!(ts, chunks[0]["first_timestamp"].as_u64().unwrap());
        }
    }
    // A flipped byte in a chunk's payload shows as a bad CRC... and scan ends the valid prefix
    // there, so inspect says where the link's data ends.
    let path = b.join("link-0001.dat");
    let mut data = std::fs::read(&path).unwrap();
    let first = ChunkHeader::decode(&data[..HEADER_BYTES]).unwrap();
    data[first.payload_offset() as usize + 100] ^= 0xFF;
    std::fs::write(&path, &data).unwrap();
    let o = snbuf(&["inspect", s, "--link", "1"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("BadChunk"));
    assert_refused(
        &snbuf(&["inspect", dir.path().to_str().unwrap()]),
        2,
        "burst",
    );
    assert_refused(&snbuf(&["inspect", s, "--link", "7"]), 2, "no link 7");
    // Output that cannot be written (a full disk under `> file`) is an error, never a success
    // with a short file; a reader that went away is no error at all.
    let o = common::output_within(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(r#""$0" inspect "$1" --json > /dev/full"#)
            .arg(env!("CARGO_BIN_EXE_snbuf"))
            .arg(s),
        common::COMMAND_DEADLINE,
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("could not be written"),
        "{}",
        common::stderr(&o)
    );
}

#[cfg(feature = "hdf5")]
mod dune_hdf5 {
    use super::*;
    use snbuf_burst::Manifest;

    /// What h5py found in `files`.
    fn read_with_h5py(files: &[PathBuf]) -> Option<Value> {
        let python = common::installed_tool(
            [PathBuf::from("/usr/bin/python3")],
            "SNBUF_REQUIRE_H5PY",
            "apt-get install python3-h5py",
        )?;
        let mut c = std::process::Command::new(python);
        c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/read_dune_hdf5.py"))
            .args(files);
        let o = common::output_within(c, std::time::Duration::from_secs(120));
        if !o.status.success() && common::stderr(&o).contains("No module named 'h5py'") {
            assert!(
                std::env::var_os("SNBUF_REQUIRE_H5PY").is_none(),
                "h5py is not installed"
            );
            eprintln!("skip: h5py is not installed");
            return None;
        }
        assert!(o.status.success(), "{}", common::stderr(&o));
        Some(serde_json::from_slice(&o.stdout).unwrap())
    }

    fn sha256_hex(data: &[u8]) -> String {
        let mut c = std::process::Command::new("sha256sum");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d");
        std::fs::write(&p, data).unwrap();
        c.arg(&p);
        let o = common::output_within(c, std::time::Duration::from_secs(60));
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    }

    fn convert(burst: &Path, out: &Path, extra: &[&str]) -> (Vec<PathBuf>, Value) {
        let summary = out.with_extension("json");
        let mut args = vec![
            "convert",
            burst.to_str().unwrap(),
            out.to_str().unwrap(),
            "--json",
            summary.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = snbuf(&args);
        assert!(o.status.success(), "{}", common::stderr(&o));
        let v: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
        let files = v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| PathBuf::from(f.as_str().unwrap()))
            .collect();
        (files, v)
    }

    #[test]
    fn a_burst_converts_to_dune_hdf5_that_h5py_reads_frame_for_frame() {
        let dir = tempfile::tempdir().unwrap();
        let b = burst(dir.path(), "b", &[]);
        let m = Manifest::read(&b).unwrap();
        let window = m.trigger.clone().unwrap();
        // Slices of 20 ms of detector time, files of at most ~4 MB: several of each.
        let out = dir.path().join("h5");
        let (files, summary) = convert(&b, &out, &["--slice", "20ms", "--max-file-size", "4MB"]);
        assert!(files.len() > 1, "{summary}");
        for f in &files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("snbuf_raw_run001234_") && name.ends_with(".hdf5"),
                "{name}"
            );
        }
        assert!(std::fs::read_dir(&out).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".writing")));
        let Some(h5) = read_with_h5py(&files) else {
            return;
        };
        let slice_ticks = summary["slice_ticks"].as_u64().unwrap();
        assert_eq!(slice_ticks, 62_500_000 / 50);
        let mut record_numbers = Vec::new();
        for (index, file) in h5["files"].as_array().unwrap().iter().enumerate() {
            let a = &file["attrs"];
            assert_eq!(a["run_number"], 1234);
            assert_eq!(a["file_index"], index as u64);
            assert_eq!(a["filelayout_version"], 6);
            // Every attribute's type as hdf5libs (layout 6) and dfmodules write it, from their
            // sources: size_t -> u64, run_number_t and the layout version -> u32, std::string ->
            // HighFive's variable-length UTF-8 string. Written from DUNE's code, not snbuf's.
            let text = "vlen-str:utf-8";
            let dune_types = [
                ("run_number", "u32"),
                ("file_index", "u64"),
                ("creation_timestamp", "u64"),
                ("closing_timestamp", "u64"),
                ("recorded_size", "u64"),
                ("filelayout_version", "u32"),
                ("application_name", text),
                ("filelayout_params", text),
                ("source_id_geo_id_map", text),
                ("record_type", text),
                ("operational_environment", text),
                ("offline_data_stream", text),
                ("run_was_for_test_purposes", text),
            ];
            let types = file["attr_types"].as_object().unwrap();
            assert_eq!(types.len(), dune_types.len(), "{types:?}");
            for (name, t) in dune_types {
                assert_eq!(types[name], t, "attribute {name}");
            }
            assert_eq!(a["record_type"], "TimeSlice");
            assert_eq!(a["application_name"], "snbuf_apa1");
            assert_eq!(a["operational_environment"], "snbuf");
            assert_eq!(a["offline_data_stream"], "snb");
            assert_eq!(a["run_was_for_test_purposes"], "false");
            assert!(
                a["creation_timestamp"].as_u64().unwrap()
                    <= a["closing_timestamp"].as_u64().unwrap()
            );
            let layout: Value =
                serde_json::from_str(a["filelayout_params"].as_str().unwrap()).unwrap();
            assert_eq!(layout["record_name_prefix"], "TimeSlice");
            assert_eq!(layout["raw_data_group_name"], "RawData");
            // hdf5libs names a readout element's datasets by this prefix.
            assert_eq!(layout["path_param_list"][0]["element_name_prefix"], "Link");
            let geo: Value =
                serde_json::from_str(a["source_id_geo_id_map"].as_str().unwrap()).unwrap();
            assert_eq!(geo["map_entries"].as_array().unwrap().len(), 2);
            let mut recorded = 0;
            for r in file["records"].as_array().unwrap() {
                let n = r["timeslice_header"]["timeslice_number"].as_u64().unwrap();
                assert_eq!(r["name"], format!("TimeSlice{n:06}"));
                record_numbers.push(n);
                assert_eq!(r["timeslice_header"]["marker"], 0x5555_6666u32);
                assert_eq!(r["timeslice_header"]["run_number"], 1234);
                assert_eq!(
                    r["datasets"],
                    serde_json::json!([
                        "Detector_Readout_0x00000000_WIBEth",
                        "Detector_Readout_0x00000001_WIBEth",
                        "TR_Builder_0x00000000_TimeSliceHeader"
                    ])
                );
                let paths = &r["attrs"]["source_id_path_map"]["map_entries"];
                assert_eq!(paths.as_array().unwrap().len(), 3);
                assert_eq!(
                    r["attrs"]["fragment_type_source_id_map"]["map_entries"][0]["fragment_type"],
                    12
                );
                assert_eq!(r["attrs"]["record_header_source_id"]["subsys"], 4);
                recorded += 32;
                for f in r["fragments"].as_array().unwrap() {
                    assert_eq!(f["marker"], 0x1111_2222u32);
                    assert_eq!(f["version"], 6, "FragmentHeader v6");
                    assert_eq!(f["size"], f["dataset_bytes"]);
                    assert_eq!(f["fragment_type"], 12, "kWIBEth");
                    assert_eq!(f["detector_id"], 3, "the frames' det_id: kHD_TPC");
                    assert_eq!(f["run_number"], 1234);
                    assert_eq!(f["trigger_number"], n);
                    assert_eq!(f["trigger_timestamp"], window.trigger_timestamp);
                    assert_eq!(f["subsys"], 1);
                    assert_eq!(f["source_id_version"], 2);
                    assert_eq!(f["status_bits"], 0, "nothing lost");
                    let (begin, end) = (
                        f["window_begin"].as_u64().unwrap(),
                        f["window_end"].as_u64().unwrap(),
                    );
                    assert_eq!(begin, window.window_start_timestamp + (n - 1) * slice_ticks);
                    assert!(end - begin <= slice_ticks && end <= window.window_end_timestamp);
                    assert_eq!(f["payload_bytes"].as_u64().unwrap() % 7200, 0);
                    recorded += f["size"].as_u64().unwrap();
                }
            }
            assert_eq!(a["recorded_size"], recorded);
        }
        let expected: Vec<u64> = (1..=record_numbers.len() as u64).collect();
        assert_eq!(
            record_numbers, expected,
            "records 1, 2, 3, ... across the files"
        );
        // The frames: every byte the burst holds, per link, in order.
        for link in 0..2u32 {
            let frames = frames_of(&b, link);
            let key = format!("1:{link}");
            assert_eq!(h5["frames"][&key], frames.len() as u64);
            assert_eq!(
                h5["frames_sha256"][&key],
                sha256_hex(&frames),
                "link {link}"
            );
        }
        // Bad input: one line, exit 2, nothing written.
        let not_a_dir = files[0].to_str().unwrap();
        let fresh = dir.path().join("fresh");
        for (args, needle) in [
            (
                vec![
                    "convert",
                    dir.path().to_str().unwrap(),
                    fresh.to_str().unwrap(),
                ],
                "burst",
            ),
            (
                vec!["convert", b.to_str().unwrap(), not_a_dir],
                "not a directory",
            ),
            (
                vec![
                    "convert",
                    b.to_str().unwrap(),
                    fresh.to_str().unwrap(),
                    "--slice",
                    "0s",
                ],
                "--slice",
            ),
        ] {
            assert_refused(&snbuf(&args), 2, needle);
            assert!(!fresh.exists(), "{args:?} wrote nothing");
        }
    }

    /// Whether Debian's python3 has hdf5plugin (the filters an analysis reads with); else the
    /// test is skipped, unless SNBUF_REQUIRE_H5PY says it must run.
    fn hdf5plugin_installed() -> bool {
        let mut c = std::process::Command::new("/usr/bin/python3");
        c.args(["-c", "import hdf5plugin"]);
        let ok = common::output_within(c, std::time::Duration::from_secs(60))
            .status
            .success();
        assert!(
            ok || std::env::var_os("SNBUF_REQUIRE_H5PY").is_none(),
            "hdf5plugin is not installed (pip install hdf5plugin)"
        );
        if !ok {
            eprintln!("skip: hdf5plugin is not installed");
        }
        ok
    }

    #[test]
    fn a_burst_converted_through_blosc_zstd_reads_back_the_same_frames_in_fewer_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let b = burst(dir.path(), "b", &[]);
        let (plain, _) = convert(&b, &dir.path().join("plain"), &["--slice", "20ms"]);
        let filtered = dir.path().join("filtered");
        let (files, _) = convert(
            &b,
            &filtered,
            &["--slice", "20ms", "--filter", "blosc-zstd"],
        );
        if !hdf5plugin_installed() {
            return;
        }
        let (Some(plain), Some(h5)) = (read_with_h5py(&plain), read_with_h5py(&files)) else {
            return;
        };
        let fragments = |v: &Value| -> Vec<Value> {
            v["files"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|f| {
                    f["records"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .flat_map(|r| r["fragments"].as_array().unwrap().clone())
                })
                .collect()
        };
        let (plain_fragments, filtered_fragments) = (fragments(&plain), fragments(&h5));
        assert!(!filtered_fragments.is_empty());
        assert_eq!(plain_fragments.len(), filtered_fragments.len());
        let (mut stored, mut bytes) = (0, 0);
        for (p, f) in plain_fragments.iter().zip(&filtered_fragments) {
            assert_eq!(
                p["filters"],
                serde_json::json!([]),
                "DUNE's own: unfiltered"
            );
            assert_eq!(f["filters"], serde_json::json!([32001]), "Blosc: {f}");
            // The same fragment, header and all, whichever way it is stored.
            let mut p = p.clone();
            let mut f2 = f.clone();
            for v in [&mut p, &mut f2] {
                for k in ["filters", "storage_bytes"] {
                    v.as_object_mut().unwrap().remove(k);
                }
            }
            assert_eq!(p, f2);
            stored += f["storage_bytes"].as_u64().unwrap();
            bytes += f["dataset_bytes"].as_u64().unwrap();
        }
        // The detector's noise: zstd keeps about 77 % of it (bench codec's byte datasets).
        assert!(
            stored * 100 < bytes * 85,
            "{stored} of {bytes} bytes stored"
        );
        for link in 0..2u32 {
            let key = format!("1:{link}");
            assert_eq!(h5["frames_sha256"][&key], sha256_hex(&frames_of(&b, link)));
        }
    }

    #[test]
    fn a_burst_with_loss_converts_with_the_loss_marked() {
        let dir = tempfile::tempdir().unwrap();
        // A medium slower than the links: frames are overwritten before they are written.
        let b = burst(
            dir.path(),
            "lossy",
            &[
                ("--buffer", "300ms"),
                ("--pre", "200ms"),
                ("--inject-fault", "slow:rate=8MB/s"),
            ],
        );
        let m = Manifest::read(&b).unwrap();
        let lost: u64 = m.links.iter().map(|l| l.lost_frames).sum();
        assert!(lost > 0, "the recording lost frames");
        let (files, summary) = convert(&b, &dir.path().join("h5"), &["--slice", "20ms"]);
        assert_eq!(
            summary["missing_frames"], lost,
            "every lost frame is marked: {summary}"
        );
        assert!(summary["incomplete_fragments"].as_u64().unwrap() > 0);
        let Some(h5) = read_with_h5py(&files) else {
            return;
        };
        // The emulated links are sub-sampled: frames are the manifest's step apart.
        let step = m.frame.as_ref().unwrap().step_ticks();
        let mut marked = 0;
        for file in h5["files"].as_array().unwrap() {
            for r in file["records"].as_array().unwrap() {
                for f in r["fragments"].as_array().unwrap() {
                    let frames = f["payload_bytes"].as_u64().unwrap() / 7200;
                    let expected = (f["window_end"].as_u64().unwrap()
                        - f["window_begin"].as_u64().unwrap())
                    .div_ceil(step);
                    let bits = f["status_bits"].as_u64().unwrap();
                    // kIncomplete = 1; kEmptyFragment = 6 exactly when no frame is left;
                    // kLatencyBufferEmpty (0) is never set by a conversion.
                    assert_eq!(bits & 1, 0, "{f}");
                    assert_eq!(bits & (1 << 6) != 0, frames == 0 && expected > 0, "{f}");
                    if bits & 2 != 0 {
                        marked += 1;
                        assert!(frames < expected, "{f}");
                    } else {
                        assert!(
                            frames + 1 >= expected,
                            "frames missing without the mark: {f}"
                        );
                    }
                }
            }
        }
        assert_eq!(marked, summary["incomplete_fragments"]);
    }
}
