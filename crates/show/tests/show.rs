//! `show` on a real burst written the recorder's way (BurstWriter, O_DIRECT): WIBEth frames with
//! known baselines and noise, a pulse on one channel at a known time, a dead and a noisy
//! channel, and a known gap. Checked from `show.json`, the data behind the figures.

use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo, Window};
use snbuf_frames::adc::{pack, ADC_BITS, ETH_ADC_OFFSET, ETH_CHANNELS};
use snbuf_frames::FrameType;
use snbuf_persist::{open, Method, SinkConfig};
use snbuf_show::{show, ShowOptions};

const TICKS: u64 = 2048;
/// A timestamp of today on the 62.5 MHz clock: more ticks than an f64 holds exactly.
const FIRST_TS: u64 = 112_226_219_699_535_000;
const FRAMES: u64 = 600;
const PER_CHUNK: u64 = 10;
const TRIGGER_FRAME: u64 = 200;
/// Frames 400..450 are missing.
const GAP: std::ops::Range<u64> = 400..450;
/// Channel 17 rises by 400 ADC for samples 10..14 of frame 300.
const PULSE: (usize, u64, std::ops::Range<usize>) = (17, 300, 10..14);
const DEAD: usize = 5;
const NOISY: usize = 40;

fn noise(frame: u64, sample: usize, channel: usize, amplitude: i64) -> i64 {
    let mut x = frame
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(((sample * 64 + channel) as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    x ^= x >> 29;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 32;
    (x % (2 * amplitude as u64 + 1)) as i64 - amplitude
}

fn adc(frame: u64, sample: usize, ch: usize) -> u16 {
    let v = if ch == DEAD {
        1000
    } else if ch == NOISY {
        900 + ch as i64 + noise(frame, sample, ch, 60)
    } else {
        900 + ch as i64 + noise(frame, sample, ch, 3)
    };
    let pulse = ch == PULSE.0 && frame == PULSE.1 && PULSE.2.contains(&sample);
    (v + if pulse { 400 } else { 0 }) as u16
}

fn frame_bytes(index: u64) -> Vec<u8> {
    let layout = FrameType::WibEth.layout();
    let mut f = vec![0u8; 7200];
    layout.write_timestamp(&mut f, FIRST_TS + index * TICKS);
    let row = ETH_CHANNELS * ADC_BITS as usize / 8;
    for s in 0..64 {
        for ch in 0..64 {
            pack(
                &mut f[ETH_ADC_OFFSET + s * row..],
                ADC_BITS,
                ch,
                adc(index, s, ch),
            );
        }
    }
    f
}

fn write_burst(root: &std::path::Path) -> std::path::PathBuf {
    write_burst_with(root, true)
}

/// The burst, with or without its frames (`frames` false: a link that recorded nothing).
fn write_burst_with(root: &std::path::Path, frames: bool) -> std::path::PathBuf {
    let spec = BurstSpec {
        burst_id: "pulse".into(),
        frame: FrameInfo {
            frame_type: "wibeth".into(),
            frame_bytes: 7200,
            ticks_per_frame: TICKS,
            clock_hz: 62_500_000,
            frame_step_ticks: None,
        },
        trigger: Some(Window {
            trigger_timestamp: FIRST_TS + TRIGGER_FRAME * TICKS,
            window_start_timestamp: FIRST_TS,
            window_end_timestamp: FIRST_TS + FRAMES * TICKS,
            ..Window::default()
        }),
        method: "direct".into(),
        links: vec![0],
        max_payload_bytes: (7200 * PER_CHUNK) as usize,
        identities: vec![],
        run_number: Some(77),
        unit: Some("apa1".into()),
        injected_faults: Vec::new(),
    };
    let mut burst = BurstWriter::create(root, spec, |_, path| {
        let mut config = SinkConfig::new(Method::Direct, path, 8 << 20);
        config.max_io_bytes = 1 << 20;
        open(&config)
    })
    .unwrap();
    let mut i = if frames { 0 } else { FRAMES };
    while i < FRAMES {
        if GAP.contains(&i) {
            i += 1;
            continue;
        }
        let payload: Vec<u8> = (i..i + PER_CHUNK).flat_map(frame_bytes).collect();
        let (first, last) = (FIRST_TS + i * TICKS, FIRST_TS + (i + PER_CHUNK - 1) * TICKS);
        burst.write_chunk(0, first, last, &payload).unwrap();
        i += PER_CHUNK;
    }
    let dir = burst.dir().to_path_buf();
    burst.seal().unwrap();
    dir
}

/// Where the page goes and how it is drawn; the burst is never exported here.
fn options(
    out_dir: std::path::PathBuf,
    links: Vec<u32>,
    channel: Option<usize>,
    columns: usize,
    bins: usize,
) -> ShowOptions {
    ShowOptions {
        out_dir,
        links,
        channel,
        columns,
        bins,
        export_state: "no".into(),
    }
}

fn seconds(frame: f64) -> f64 {
    (frame - TRIGGER_FRAME as f64) * TICKS as f64 / 62.5e6
}

#[test]
fn the_page_shows_the_pulse_where_it_was_and_the_gap_where_it_was() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_burst(root.path());
    let out = root.path().join("show");
    let mut last = (0, 0);
    let shown = show(
        &dir,
        &options(out.clone(), vec![], None, 600, 60),
        &mut |done, total| last = (done, total),
    )
    .unwrap();
    assert_eq!(last.0, last.1, "progress reaches the total");
    assert_eq!(last.1, (FRAMES - (GAP.end - GAP.start)) * 7200);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("show.json")).unwrap()).unwrap();
    assert_eq!(json["run_number"], 77);
    let l = &json["links"][0];
    assert_eq!(l["frames"], FRAMES - (GAP.end - GAP.start));
    assert_eq!(l["expected_frames"], FRAMES);
    // The gap, exactly: from frame 400's time to frame 450's, 50 frames.
    let gaps = l["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0]["frames"], (GAP.end - GAP.start));
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(near(
        gaps[0]["from_s"].as_f64().unwrap(),
        seconds(GAP.start as f64)
    ));
    assert!(near(
        gaps[0]["to_s"].as_f64().unwrap(),
        seconds(GAP.end as f64)
    ));
    // The timeline's bins in the gap are empty, the others full.
    for b in l["timeline"].as_array().unwrap() {
        let (from, to) = (b["from_s"].as_f64().unwrap(), b["to_s"].as_f64().unwrap());
        let inside = from >= seconds(GAP.start as f64) && to <= seconds(GAP.end as f64);
        if inside {
            assert_eq!(b["recorded"], 0, "{b}");
        }
        if to <= seconds(GAP.start as f64) - 0.0001 || from >= seconds(GAP.end as f64) + 0.0001 {
            assert_eq!(b["recorded"], b["expected"], "{b}");
        }
    }
    // The heat map: the pulse at channel 17 in the column of its time, +400 over the baseline;
    // no other cell of the quiet channels near it; the gap's columns hold no data.
    let adc = &l["adc"];
    let heat = adc["heat"].as_array().unwrap();
    let pulse_s = seconds(PULSE.1 as f64 + 11.5 / 64.0);
    let (w0, w1) = (
        json["window_s"][0].as_f64().unwrap(),
        json["window_s"][1].as_f64().unwrap(),
    );
    let col = ((pulse_s - w0) / (w1 - w0) * 600.0) as usize;
    let row: Vec<f64> = heat[PULSE.0]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    assert!((row[col] - 400.0).abs() <= 4.0, "pulse cell {}", row[col]);
    let (best, _) = row
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .unwrap();
    assert_eq!(best, col, "the pulse is the channel's largest cell");
    for (ch, r) in heat.iter().enumerate() {
        if ch == PULSE.0 || ch == NOISY {
            continue;
        }
        let v = r[col].as_f64().unwrap();
        assert!(v.abs() <= 4.0, "channel {ch} at the pulse: {v}");
    }
    let gap_col = ((seconds(425.0) - w0) / (w1 - w0) * 600.0) as usize;
    assert!(heat[0][gap_col].is_null(), "the gap has no data");
    // The channels: baselines (medians) and noise, dead and noisy flagged.
    let channels = adc["channels"].as_array().unwrap();
    assert_eq!(channels[3]["baseline"], 903.0);
    assert!(channels[3]["rms"].as_f64().unwrap() < 3.0);
    assert_eq!(channels[DEAD]["flag"], "dead");
    assert_eq!(channels[NOISY]["flag"], "noisy");
    assert_eq!(
        channels.iter().filter(|c| c["flag"] != "ok").count(),
        2,
        "only those two"
    );
    // The waveform: of channel 17 (largest excursion), its peak at the pulse's time.
    let wf = &l["waveform"];
    assert_eq!(wf["channel"], PULSE.0);
    assert_eq!(wf["chosen"], "largest excursion");
    let peak_s = channels[PULSE.0]["peak_s"].as_f64().unwrap();
    let in_pulse = PULSE.2.map(|s| seconds(PULSE.1 as f64 + s as f64 / 64.0));
    assert!(in_pulse.clone().any(|t| near(t, peak_s)), "{peak_s}");
    let zoom = wf["zoom"].as_array().unwrap();
    let top = zoom
        .iter()
        .max_by(|a, b| a[1].as_f64().unwrap().total_cmp(&b[1].as_f64().unwrap()))
        .unwrap();
    assert!((top[1].as_f64().unwrap() - 400.0).abs() <= 4.0);
    assert!(
        zoom.len() > 200,
        "full resolution around it: {}",
        zoom.len()
    );
    // The page and its figures.
    let html = std::fs::read_to_string(&shown.page).unwrap();
    for stem in [
        "timeline",
        "link-0-heat",
        "link-0-waveform",
        "link-0-zoom",
        "link-0-noise",
    ] {
        assert!(html.contains(&format!("<figure id=\"{stem}\"")), "{stem}");
        assert!(out.join(format!("{stem}.svg")).is_file());
        assert!(out.join(format!("{stem}.png")).is_file());
    }
    let svg = std::fs::read_to_string(out.join("link-0-heat.svg")).unwrap();
    assert!(
        svg.contains("<image"),
        "the heat map's cells are one embedded bitmap"
    );
    assert!(html.contains("run</th><td>77"));
}

#[test]
fn a_channel_that_is_not_there_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_burst(root.path());
    let e = show(
        &dir,
        &options(root.path().join("show"), vec![], Some(64), 100, 10),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--channel 64: a wibeth link has channels 0-63"
    );
}

#[test]
fn a_damaged_chunk_is_not_shown_and_the_page_says_so() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_burst(root.path());
    // One flipped payload byte in chunk 20: its checksum fails, so it and what follows are
    // not read (the valid prefix ends there), and the page says why.
    let reader = snbuf_burst::BurstReader::open(&dir).unwrap();
    let c = reader.link(0).unwrap().chunks()[20];
    let path = dir.join("link-0000.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(c.offset + c.payload_offset + 100) as usize] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let out = root.path().join("show");
    let shown = show(
        &dir,
        &options(out.clone(), vec![], None, 100, 10),
        &mut |_, _| {},
    )
    .unwrap();
    let l = &shown.links[0];
    assert_eq!(
        l.frames,
        20 * PER_CHUNK,
        "only the chunks before the damaged one"
    );
    assert_eq!(l.skipped.len(), 1, "{:?}", l.skipped);
    assert!(l.skipped[0].contains("bad chunk"), "{}", l.skipped[0]);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("Only verified chunks are shown"));
}

#[test]
fn a_link_that_recorded_nothing_is_one_gap_and_every_channel_dead() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_burst_with(root.path(), false);
    let shown = show(
        &dir,
        &options(root.path().join("show"), vec![0], None, 100, 10),
        &mut |_, _| {},
    )
    .unwrap();
    let l = &shown.links[0];
    assert_eq!((l.frames, l.expected_frames), (0, FRAMES));
    assert_eq!(l.gaps.len(), 1);
    assert_eq!(l.gaps[0].frames, FRAMES, "the whole window");
    let adc = l.adc.as_ref().unwrap();
    assert!(adc
        .channels
        .iter()
        .all(|c| c.flag == "dead" && c.samples == 0));
    assert!(adc.heat.iter().flatten().all(|v| v.is_nan()));
    assert!(shown.page.is_file());
}
