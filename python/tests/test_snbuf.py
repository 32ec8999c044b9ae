"""The Python reader against bursts recorded by the snbuf binary ($SNBUF_BIN): a good burst, one
with a flipped byte, one torn. `snbuf.verify` must agree with `snbuf verify` (valid or not, and
the same chunk and frame counts per link), and the frames must be the emulator's."""

import io
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import snbuf

BIN = os.environ.get("SNBUF_BIN") or shutil.which("snbuf")
pytestmark = pytest.mark.skipif(not BIN, reason="set SNBUF_BIN to the snbuf binary")
TICKS = 2048  # WIBEth's own step; at 2 MB/s the emulator sends one frame in about 110


def record(tmp_path, burst_id="b"):
    out = tmp_path / "data"
    subprocess.run([BIN, "record", "--frame", "wibeth", "--links", "2", "--rate-per-link", "2MB/s",
                    "--buffer", "1s", "--pre", "200ms", "--post", "500ms", "--trigger-after", "300ms",
                    "--chunk-frames", "16", "--run", "77", "--unit", "apa9", "--method", "buffered",
                    "--output", str(out), "--burst-id", burst_id],
                   check=True, capture_output=True, timeout=120)
    return out / burst_id


def snbuf_verify(path):
    p = subprocess.run([BIN, "verify", "--json", str(path)], capture_output=True, timeout=120)
    return p.returncode, json.loads(p.stdout)


def assert_agrees(path):
    """Python's verify and the binary's: same verdict, same counts, same kind of end."""
    code, theirs = snbuf_verify(path)
    ours = snbuf.verify(snbuf.open(str(path)))
    assert ours["valid"] == (code == 0) == theirs["valid"]
    assert [l["link"] for l in ours["links"]] == [l["link"] for l in theirs["links"]]
    for a, b in zip(ours["links"], theirs["links"]):
        for k in ("chunks", "frames", "payload_bytes", "first_timestamp", "last_timestamp",
                  "chunks_after_end"):
            assert a[k] == b[k], (k, a, b)
        assert a["end"] == b["end"], (a["end"], b["end"])
        assert bool(a["problems"]) == bool(b["problems"]), (a["problems"], b["problems"])
    return ours


def test_a_good_burst_reads_as_recorded(tmp_path):
    path = record(tmp_path)
    b = snbuf.open(str(path))
    assert b.frame_type == "wibeth" and b.manifest["run_number"] == 77 and b.manifest["unit"] == "apa9"
    report = assert_agrees(path)
    assert report["valid"]
    # Time is the detector's: a second is 62.5e6 ticks, whatever the rate; the emulator below
    # WIBEth's own rate is a sub-sampled detector, its frames `frame_step_ticks` apart.
    assert b.clock_hz == 62_500_000
    step = b.frame_step_ticks
    assert step == round(62_500_000 / (2e6 / 7200)) and step > TICKS
    pre, post = b.window_s()
    assert abs(pre + 0.2) <= step / b.clock_hz and abs(post - 0.5) <= step / b.clock_hz
    for n in (0, 1):
        link = b.link(n)
        rec = next(l for l in b.manifest["links"] if l["link"] == n)
        assert len(link.chunks) == rec["chunks"] and link.frames_count == rec["frames"]
        ts = link.timestamps()
        assert ts.dtype == np.uint64 and len(ts) == rec["frames"]
        assert int(ts[0]) == rec["first_timestamp"] and int(ts[-1]) == rec["last_timestamp"]
        assert np.all(np.diff(ts) == step), "a lossless link: every frame, in order"
        assert abs(b.seconds(int(ts[-1]) + step - int(ts[0])) - 0.7) <= 2 * step / b.clock_hz
        frames = link.chunks[1].frames()
        ident = b.layout.identity(frames)
        assert np.all(ident["stream_id"] == n) and np.all(ident["det_id"] == 3)
        seq = b.layout.sequence(frames)
        assert np.array_equal(seq, ((b.layout.timestamps(frames) // step) % 4096).astype(np.uint16))
        # The emulator's detector (crates/readout/src/emulated_detector.rs), as unpacked here:
        # channels in groups of eight by plane (U, V, X, U, ...), induction near mid-range,
        # collection low, each with ProtoDUNE-HD's noise (8-14 counts, median 11); frames 16
        # apart replay the same
        # bank frame, so their values are the same.
        adc = snbuf.unpack_wibeth_adc(frames)
        assert adc.shape == (len(frames), 64, 64)
        # Medians: robust to a track's few samples.
        per_channel = adc.reshape(-1, 64).astype(float)
        baseline = np.median(per_channel, axis=0)
        noise = np.median(np.abs(per_channel - baseline), axis=0) / 0.6745
        collection = (np.arange(64) // 8) % 3 == 2
        assert np.all(baseline[collection] < 0.2 * (1 << 14)), baseline
        assert np.all(np.abs(baseline[~collection] - (1 << 13)) < 300), baseline
        assert np.all((noise > 6) & (noise < 16)), noise
        assert 9 <= np.median(noise) <= 13, noise
        idx = b.layout.timestamps(frames) // step
        for k in range(len(frames) - 16):
            if idx[k + 16] - idx[k] == 16 and not np.array_equal(adc[k], adc[k + 16]):
                # Only a track's frames (every 0.25 s) are not in the 16-frame cycle.
                assert max(np.abs(adc[j] - baseline).max() for j in (k, k + 16)) > 40


def test_a_flipped_byte_is_found_as_snbuf_finds_it(tmp_path):
    path = record(tmp_path)
    f = path / "link-0001.dat"
    b = snbuf.open(str(path))
    c = b.link(1).chunks[3]
    data = bytearray(f.read_bytes())
    data[c.offset + c.header_bytes + 1000] ^= 0x40
    f.write_bytes(bytes(data))
    report = assert_agrees(path)
    assert not report["valid"]
    link = report["links"][1]
    assert link["chunks"] == 3 and link["end"]["kind"] == "bad_chunk"
    assert link["chunks_after_end"] > 0
    # A chunk read after it changed is refused, not handed on.
    with pytest.raises(ValueError):
        c.payload()


def test_a_torn_tail_is_found_as_snbuf_finds_it(tmp_path):
    path = record(tmp_path)
    f = path / "link-0000.dat"
    b = snbuf.open(str(path))
    last = b.link(0).chunks[-1]
    with open(f, "r+b") as fh:
        fh.truncate(last.offset + last.header_bytes + 100)
    report = assert_agrees(path)
    assert not report["valid"]
    assert report["links"][0]["end"]["kind"] == "torn_tail"
    assert report["links"][0]["chunks"] == len(b.link(0).chunks) - 1


def test_headers_and_checksums_are_checked_byte_for_byte():
    assert snbuf.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    with pytest.raises(snbuf.HeaderError):
        snbuf.ChunkHeader.decode(b"\0" * 64)
    with pytest.raises(snbuf.HeaderError):
        snbuf.ChunkHeader.decode(b"SNBUFCHK" + b"\1" * 56)


def test_adc_samples_carry_their_own_times_and_agree_with_snbuf_show(tmp_path):
    out = tmp_path / "data"
    subprocess.run([BIN, "record", "--frame", "tdeeth", "--links", "1", "--rate-per-link", "2MB/s",
                    "--buffer", "1s", "--pre", "100ms", "--post", "200ms", "--trigger-after", "300ms",
                    "--method", "buffered", "--output", str(out), "--burst-id", "tde"],
                   check=True, capture_output=True, timeout=120)
    b = snbuf.open(str(out / "tde"))
    link = b.link(0)
    # TDEEth: 64 samples over a frame's 2000 ticks, 31.25 ticks apart (not WIBEth's 32).
    assert b.layout.ticks_per_sample == 31.25
    assert snbuf.layout("wibeth").ticks_per_sample == 32
    t, adc = link.adc()
    assert adc.shape == (link.frames_count * 64, 64) and len(t) == len(adc)
    ticks = t * b.clock_hz
    assert np.allclose(np.diff(ticks[:64]), 31.25, atol=1e-6)
    first = int(link.timestamps()[0]) - b.manifest["trigger"]["trigger_timestamp"]
    assert abs(ticks[0] - first) < 1e-3 and abs(ticks[63] - (first + 63 * 31.25)) < 1e-3
    # A window in seconds from the trigger selects frames by their timestamps.
    t2, adc2 = link.adc(-0.05, 0.05)
    assert len(t2) and t2.min() >= -0.05 and t2[::64].max() < 0.05 and len(t2) < len(t)
    # baseline and rms are the numbers `snbuf show` computes for its page, channel by channel.
    p = subprocess.run([BIN, "show", str(out / "tde"), "--out", str(tmp_path / "page"), "--json"],
                       check=True, capture_output=True, timeout=120)
    shown = json.loads(p.stdout)["links"][0]["adc"]["channels"]
    assert np.array_equal(link.baseline(), np.array([c["baseline"] for c in shown]))
    assert np.allclose(link.rms(), np.array([c["rms"] for c in shown]), rtol=1e-9, atol=1e-9)


def test_the_matplotlib_helpers_draw_a_link(tmp_path):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    import snbuf.plot
    b = snbuf.open(str(record(tmp_path)))
    fig, (a1, a2) = plt.subplots(2)
    snbuf.plot.heat_map(b.link(0), ax=a1)
    snbuf.plot.waveform(b.link(0), channel=3, ax=a2)
    fig.savefig(tmp_path / "link.png")
    assert (tmp_path / "link.png").stat().st_size > 1000
    assert a1.get_ylabel() == "channel" and len(a2.lines) == 1


@pytest.mark.parametrize("frame", ["protodune-wib", "daphneeth-stream", "wib2"])
def test_every_dune_frame_type_decodes_as_snbuf_show_decodes_it(tmp_path, frame):
    # The emulator's ProtoDUNE WIB and DAPHNE frames carry a byte pattern, not a detector's
    # signal: decoded through the COLDATA (or stream) layout, it still gives every channel its
    # own distribution, which the Rust and the Python decoders must agree on value for value.
    burst = record_one_link(tmp_path, frame, "2MB/s", "100ms", "--method", "buffered")
    link = snbuf.open(str(burst)).link(0)
    t, adc = link.adc()
    channels, per_frame = link.layout.adc
    assert adc.shape == (link.frames_count * per_frame, channels)
    p = subprocess.run([BIN, "show", str(burst), "--out", str(tmp_path / "page"), "--json"],
                       check=True, capture_output=True, timeout=120)
    shown = json.loads(p.stdout)["links"][0]["adc"]["channels"]
    assert np.array_equal(link.baseline(), np.array([c["baseline"] for c in shown]))
    assert np.allclose(link.rms(), np.array([c["rms"] for c in shown]), rtol=1e-9, atol=1e-9)


def record_one_link(tmp_path, frame, rate, post, *extra):
    """A burst of one emulated link of `frame` frames at `rate`, 100 ms before its trigger to
    `post` after, recorded by the binary: its path."""
    out = tmp_path / "data"
    subprocess.run([BIN, "record", "--frame", frame, "--links", "1", "--rate-per-link", rate,
                    "--buffer", "1s", "--pre", "100ms", "--post", post, "--trigger-after", "300ms",
                    *extra, "--output", str(out), "--burst-id", "x"],
                   check=True, capture_output=True, timeout=120)
    return out / "x"


def coded_copy(tmp_path, burst, links=2):
    """`snbuf export --codec frames` of `burst` (`links` links) into a directory store: the
    copy's path."""
    store = tmp_path / "store"
    store.mkdir()
    subprocess.run([BIN, "export", str(burst), "--to", f"file://{store}", "--codec", "frames"],
                   check=True, capture_output=True, timeout=120)
    copy = store / burst.name
    assert sorted(p.name for p in copy.iterdir() if p.name.startswith("link-")) == [
        f"link-{n:04d}.dat.snbl" for n in range(links)]
    return copy


def test_a_coded_copy_reads_as_the_burst_it_holds_byte_for_byte(tmp_path):
    # The link files `snbuf export --codec frames` sends as <file>.snbl, decoded by Python
    # alone (snbuf.coded): every byte of every link file, so every frame and ADC value.
    burst = record(tmp_path)
    copy = coded_copy(tmp_path, burst)
    orig, coded = snbuf.open(str(burst)), snbuf.open(str(copy))
    assert coded.coded == "snbuf-frames-2" and orig.coded is None
    assert list(coded.links) == list(orig.links) == [0, 1]
    for n, link in orig.links.items():
        with open(link.path, "rb") as a, open(coded.link(n).path, "rb") as b:
            assert a.read() == b.read(), f"link {n}"
        for mine, theirs in zip(coded.link(n).adc(), link.adc()):  # times, values
            assert np.array_equal(mine, theirs)
    mine, theirs = coded.verify(), orig.verify()
    assert mine["valid"] and theirs["valid"]
    assert [l["frames"] for l in mine["links"]] == [l["frames"] for l in theirs["links"]]


@pytest.mark.parametrize("frame", ["tdeeth", "daphneeth-stream", "wib2", "protodune-wib"])
def test_a_coded_copy_of_every_frame_type_decodes_byte_for_byte(tmp_path, frame):
    # Each type's ADC layout (rows, WIB2's sub-frames, WIB1's COLDATA segments) written back
    # bit for bit by Python's decoder; the CRC-32C of every payload says so too.
    burst = record_one_link(tmp_path, frame, "1MB/s", "300ms", "--chunk-frames", "16")
    copy = coded_copy(tmp_path, burst, links=1)
    coded = (copy / "link-0000.dat.snbl").stat().st_size
    raw = (burst / "link-0000.dat").read_bytes()
    assert coded < 0.6 * len(raw), "modeled, not stored raw"
    # (The link outlives its Burst: it keeps its decoded file.)
    link = snbuf.open(str(copy)).link(0)
    with open(link.path, "rb") as f:
        assert f.read() == raw
    assert link.frames_count > 0


@pytest.mark.parametrize("frame", ["wibeth", "tdeeth", "daphneeth-stream", "wib2", "protodune-wib"])
def test_a_chunk_coded_in_format_1_still_decodes(frame):
    # Chunks snbuf coded before format 2 (crates/codec/tests/v1/, the emulator's frames then and
    # a 4-byte tail), each checked against the CRC-32C of its raw bytes as it decodes; the Rust
    # codec's own test decodes the same files.
    path = os.path.join(os.path.dirname(__file__), "../../crates/codec/tests/v1", frame + ".snbc")
    with open(path, "rb") as f:
        coded = f.read()
    assert coded[4] == 1
    frames = {"wibeth": 6, "tdeeth": 3, "daphneeth-stream": 3, "wib2": 2, "protodune-wib": 2}[frame]
    raw = snbuf.coded.decode_chunk(coded, frame)
    assert len(raw) == frames * snbuf.frames.LAYOUTS[frame].frame_bytes + 4
    assert raw.endswith(b"tail")


def damage(path, how):
    """`path`'s bytes damaged `how`: a flipped bit mid-file, its last 100 bytes cut, a byte
    appended."""
    data = bytearray(path.read_bytes())
    if how == "flip":
        # A bit inside a coded payload, past the container's and the chunk's headers.
        data[len(data) // 2] ^= 0x10
    elif how == "truncate":
        del data[len(data) - 100:]
    else:
        data += b"\0"
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "append"])
def test_a_damaged_coded_file_is_one_clear_error_when_decoded_strictly(tmp_path, how):
    burst = record(tmp_path)
    path = coded_copy(tmp_path, burst) / "link-0001.dat.snbl"
    damage(path, how)
    with pytest.raises(ValueError, match="link-0001.dat.snbl: a corrupt coded link file"):
        snbuf.coded.decode_link_file(str(path), io.BytesIO())


def test_a_coded_chunk_whose_kept_header_bytes_changed_fails_its_crc(tmp_path):
    # A frame's header bytes are kept verbatim: one changed still decodes, to other bytes; only
    # the CRC-32C of the raw bytes the chunk carries tells, and the chunk is refused.
    burst = record(tmp_path)
    data = (coded_copy(tmp_path, burst) / "link-0000.dat.snbl").read_bytes()
    at = 6 + data[5]
    while data[at] != snbuf.coded.CODED:
        at += 5 + int.from_bytes(data[at + 1:at + 5], "little")
    n = int.from_bytes(data[at + 1:at + 5], "little")
    chunk = bytearray(data[at + 5:at + 5 + n])
    assert snbuf.coded.decode_chunk(bytes(chunk), "wibeth"), "decodes as it is"
    frames_at = 6 + chunk[5] + 16
    assert chunk[frames_at] == snbuf.coded.STORED_MODELED
    chunk[frames_at + 5 + 20] ^= 0x01  # the first frame's header, kept as it is
    with pytest.raises(ValueError, match="CRC-32C"):
        snbuf.coded.decode_chunk(bytes(chunk), "wibeth")


def test_a_copy_coded_by_a_newer_snbuf_says_so_and_is_never_read_as_damage(tmp_path):
    # A payload format or a codec this reader does not know is no damage: read on, it would
    # give zeros for every chunk; it is one error that says what to do.
    burst = record(tmp_path)
    copy = coded_copy(tmp_path, burst)
    path = copy / "link-0000.dat.snbl"
    data = bytearray(path.read_bytes())
    at = 6 + data[5]
    while data[at] != snbuf.coded.CODED:
        at += 5 + int.from_bytes(data[at + 1:at + 5], "little")
    assert data[at + 5:at + 10] == b"SNBC\x02"
    data[at + 9] = 3
    path.write_bytes(bytes(data))
    for keep_reading in (False, True):
        with pytest.raises(snbuf.coded.NewerFormat, match="link-0000.dat.snbl: .*upgrade snbuf"):
            snbuf.coded.decode_link_file(str(path), io.BytesIO(), keep_reading=keep_reading)
    manifest = copy / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"snbuf-frames-2"', '"snbuf-frames-9"'))
    with pytest.raises(ValueError, match="snbuf-frames-9.*upgrade snbuf"):
        snbuf.open(str(copy))


@pytest.mark.parametrize("how", ["flip", "truncate", "append"])
def test_a_damaged_coded_copy_reads_as_snbuf_reads_it_never_a_wrong_frame(tmp_path, how, monkeypatch):
    # As snbuf's readers: what does not decode is a chunk that fails its checks, or the file's
    # end; every frame read is one the detector sent, and verify says what is wrong, as
    # `snbuf verify` does.
    burst = record(tmp_path)
    copy = coded_copy(tmp_path, burst)
    damage(copy / "link-0001.dat.snbl", how)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    b = snbuf.open(str(copy))
    orig = snbuf.open(str(burst))
    assert np.array_equal(b.link(0).adc()[1], orig.link(0).adc()[1]), "link 0 intact"
    if how == "append":
        # A byte after the end: every chunk is whole.
        with pytest.warns(UserWarning, match="damaged"):
            link = b.link(1)
        assert len(link.chunks) == len(orig.link(1).chunks)
    else:
        with pytest.warns(UserWarning, match="damaged"):
            link = b.link(1)
        assert link.end["kind"] != "clean"
    # Whatever was read back is the detector's, chunk for chunk.
    for mine, theirs in zip(link.chunks, orig.link(1).chunks):
        assert mine.payload() == theirs.payload()
    report = snbuf.verify(b)
    theirs = json.loads(subprocess.run([BIN, "verify", "--json", str(copy)], capture_output=True,
                                       timeout=120).stdout)
    assert report["valid"] == theirs["valid"] == (how == "append"), report
    assert [l["frames"] for l in report["links"]] == [l["frames"] for l in theirs["links"]]
    assert not report["links"][0]["problems"], "link 0's report is link 0's own"
    del b, link, report
    assert not list(scratch.iterdir()), "no decoded file left behind"


def test_a_coded_copy_chooses_the_files_snbuf_chooses_and_chunks_outlive_their_burst(tmp_path):
    burst = record(tmp_path)
    copy = coded_copy(tmp_path, burst)
    # A stale plain file beside the coded one: the manifest says coded, so the coded one is read.
    (copy / "link-0000.dat").write_bytes(b"stale")
    chunks = snbuf.open(str(copy)).link(0).chunks
    assert chunks[0].payload() == snbuf.open(str(burst)).link(0).chunks[0].payload()
    assert snbuf.verify(snbuf.open(str(copy)))["valid"]
