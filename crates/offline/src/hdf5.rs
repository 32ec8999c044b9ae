//! DUNE HDF5 raw-data files, as DUNE-DAQ's hdf5libs writes them in the release
//! `dune::DUNE_RELEASE` names (file layout version 6, `TimeSlice` records): the file's attributes (run, index, times, layout, the SourceID to geo
//! id map, ...), one group `TimeSlice{06d}` per slice of the window holding
//! `RawData/TR_Builder_0x00000000_TimeSliceHeader` and, per link,
//! `RawData/Detector_Readout_0x{SourceID:08x}_{FragmentType}`: a FragmentHeader v6 followed by
//! the link's frames of the slice, unchanged; record attributes are the JSON maps hdf5libs
//! keeps. A file is written as `<name>.writing` and renamed when complete; a new file starts
//! where the next record would pass `max_file_bytes`. Datasets are written a chunk of the burst
//! at a time: memory stays at one chunk, whatever the burst's size.

use std::path::{Path, PathBuf};

use hdf5_metno as h5;
use snbuf_burst::{BurstReader, LinkReader, ReadError};
use snbuf_frames::FrameType;

use crate::dune::{fragment_type, geo_id, FragmentHeader, SourceId, Subsystem, TimeSliceHeader};
use crate::filter::Hdf5Filter;
use crate::plan::{plan_fragment, slices, FragmentPlan};

/// hdf5libs' file layout version these files follow: 6, whose creation and closing times are
/// integers (ms since the epoch; layout 5 kept them as decimal strings).
pub const FILELAYOUT_VERSION: u32 = 6;

/// Bytes of a chunk of a filtered fragment: a filter works a chunk at a time, and 1 MiB is
/// HDF5's own advice for a chunk read whole.
const FILTER_CHUNK_BYTES: usize = 1 << 20;
/// zstd's level in Blosc, the one `snbuf bench codec` measures (its byte-dataset rows: on the
/// detector's noise, 23 % smaller than the raw bytes, at about 0.06 GiB/s a core).
const BLOSC_ZSTD_LEVEL: u8 = 5;

/// How to convert.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub out_dir: PathBuf,
    /// Length of one record (TimeSlice), ticks.
    pub slice_ticks: u64,
    /// A new file starts before a record would take a file past this.
    pub max_file_bytes: u64,
    /// The file name's first part and the `operational_environment` attribute.
    pub operational_environment: String,
    pub offline_data_stream: String,
    pub run_was_for_test_purposes: bool,
    /// The filter fragments are stored through (none: DUNE's own, contiguous).
    pub filter: Hdf5Filter,
}

/// What was written.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Converted {
    pub files: Vec<PathBuf>,
    pub records: u64,
    pub fragments: u64,
    pub frames: u64,
    /// Fragments with frames missing (marked incomplete, or data not found).
    pub incomplete_fragments: u64,
    pub missing_frames: u64,
    /// Bytes of fragments and record headers written.
    pub bytes: u64,
}

/// `convert --json`: what was converted, from which window, and what was written.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ConvertRecord {
    pub burst: PathBuf,
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
    /// Length of one TimeSlice record, in ticks of the detector's clock.
    pub slice_ticks: u64,
    #[serde(flatten)]
    pub converted: Converted,
    pub seconds: f64,
}

impl Converted {
    /// Counts one record written: `bytes` of it, its fragments as planned.
    fn count_record(&mut self, plan: &[FragmentPlan], bytes: u64) {
        self.records += 1;
        self.bytes += bytes;
        for p in plan {
            self.fragments += 1;
            self.frames += p.frames;
            if p.frames < p.expected {
                self.incomplete_fragments += 1;
                self.missing_frames += p.expected - p.frames;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{0}")]
    Read(#[from] ReadError),
    #[error("{path}: HDF5: {cause}")]
    Hdf5 { path: PathBuf, cause: h5::Error },
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}: the burst has no trigger window to convert")]
    NoWindow(PathBuf),
    #[error("{0} exists: snbuf does not write over a file")]
    Exists(PathBuf),
    #[error("{path}: link {link}'s frames of record {record} changed while they were converted")]
    Changed {
        path: PathBuf,
        link: u32,
        record: u64,
    },
}

/// One link as the files describe it.
struct LinkSource {
    reader: LinkReader,
    link: u32,
    source_id: SourceId,
    det_id: u8,
    geo_id: u64,
}

/// Converts `burst` into DUNE HDF5 raw-data files in `opts.out_dir`. `progress(done, total)`
/// in bytes. On failure nothing stays behind: files of this conversion are removed.
pub fn convert(
    burst: &BurstReader,
    opts: &ConvertOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Converted, ConvertError> {
    let m = &burst.manifest;
    let window = m
        .trigger
        .as_ref()
        .ok_or_else(|| ConvertError::NoWindow(burst.dir.clone()))?;
    let frame_type: FrameType = m
        .frame
        .as_ref()
        .and_then(|f| f.frame_type.parse().ok())
        .unwrap_or(FrameType::Custom {
            frame_bytes: burst.layout.frame_bytes,
            ticks_per_frame: burst.layout.ticks_per_frame,
            timestamp_offset: 0,
        });
    let links = links_of(burst)?;
    let records = slices(
        window.window_start_timestamp,
        window.window_end_timestamp,
        opts.slice_ticks,
    );
    // Plan every fragment first: the sizes fix each dataset, and the total the progress.
    let plans = records
        .iter()
        .map(|r| {
            links
                .iter()
                .map(|l| plan_fragment(&l.reader, l.link, r))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fb = burst.layout.frame_bytes as u64;
    let record_bytes = |p: &[FragmentPlan]| {
        TimeSliceHeader::BYTES as u64
            + p.iter()
                .map(|f| FragmentHeader::BYTES as u64 + f.frames * fb)
                .sum::<u64>()
    };
    let total: u64 = plans.iter().map(|p| record_bytes(p)).sum();
    let files = FileSet {
        opts,
        run: m.run_number.unwrap_or(0),
        application: format!("snbuf_{}", m.unit.as_deref().unwrap_or("unit")),
        geo_map: geo_map_json(&links),
        created: Vec::new(),
    };
    let mut files = files;
    let result = (|| {
        let mut done = Converted::default();
        let mut current: Option<OpenFile> = None;
        for (r, plan) in records.iter().zip(&plans) {
            let bytes = record_bytes(plan);
            if current
                .as_ref()
                .is_some_and(|f| f.recorded > 0 && f.recorded + bytes > opts.max_file_bytes)
            {
                let f = current.take().expect("a file");
                done.files.push(files.close(f)?);
            }
            if current.is_none() {
                current = Some(files.open(files.created.len() as u64)?);
            }
            let f = current.as_mut().expect("a file");
            write_record(
                f,
                r.number,
                r.begin,
                r.end,
                window.trigger_timestamp,
                &links,
                plan,
                frame_type,
                files.run,
            )?;
            f.recorded += bytes;
            done.count_record(plan, bytes);
            progress(done.bytes, total);
        }
        if let Some(f) = current.take() {
            done.files.push(files.close(f)?);
        }
        Ok(done)
    })();
    if result.is_err() {
        for p in &files.created {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// Each link of the burst, with its DUNE identity (the link number stands in for a source id the
/// manifest does not have).
fn links_of(burst: &BurstReader) -> Result<Vec<LinkSource>, ConvertError> {
    let mut links = Vec::new();
    for l in &burst.manifest.links {
        let id = l.identity.unwrap_or_default();
        let source_id = if l.identity.is_some() {
            id.source_id
        } else {
            l.link
        };
        links.push(LinkSource {
            reader: burst.link(l.link)?,
            link: l.link,
            source_id: SourceId::readout(source_id),
            det_id: id.det_id,
            geo_id: geo_id(id.det_id, id.crate_id, id.slot_id, id.stream_id),
        });
    }
    Ok(links)
}

/// The files of one conversion.
struct FileSet<'a> {
    opts: &'a ConvertOptions,
    run: u32,
    application: String,
    geo_map: String,
    /// Every file this conversion made, in progress or complete (removed on failure).
    created: Vec<PathBuf>,
}

struct OpenFile {
    file: h5::File,
    writing: PathBuf,
    done: PathBuf,
    recorded: u64,
    /// Through which filter its fragments are stored.
    filter: Hdf5Filter,
}

fn h5err(path: &Path) -> impl Fn(h5::Error) -> ConvertError {
    let path = path.to_path_buf();
    move |cause| ConvertError::Hdf5 {
        path: path.clone(),
        cause,
    }
}

fn now_ms() -> u64 {
    snbuf_quantity::now_unix_ns() / 1_000_000
}

impl FileSet<'_> {
    fn open(&mut self, index: u64) -> Result<OpenFile, ConvertError> {
        let created_ms = now_ms();
        let stamp = snbuf_quantity::utc_stamp(created_ms / 1000);
        let stamp = stamp.trim_end_matches('Z');
        // DUNE's pattern: <environment>_raw_run<run>_<index>_<application>_<time>.hdf5.
        let name = format!(
            "{}_raw_run{:06}_{:04}_{}_{}.hdf5",
            self.opts.operational_environment, self.run, index, self.application, stamp
        );
        let done = self.opts.out_dir.join(&name);
        let writing = self.opts.out_dir.join(format!("{name}.writing"));
        if done.exists() || writing.exists() {
            return Err(ConvertError::Exists(done));
        }
        let e = h5err(&writing);
        let file = h5::File::create_excl(&writing).map_err(&e)?;
        self.created.push(writing.clone());
        let s = |f: &h5::File, k: &str, v: &str| -> h5::Result<()> {
            let v: h5::types::VarLenUnicode = v.parse().expect("no NUL in attribute text");
            f.new_attr::<h5::types::VarLenUnicode>()
                .create(k)?
                .write_scalar(&v)
        };
        file.new_attr::<u32>()
            .create("run_number")
            .and_then(|a| a.write_scalar(&self.run))
            .map_err(&e)?;
        file.new_attr::<u64>()
            .create("file_index")
            .and_then(|a| a.write_scalar(&index))
            .map_err(&e)?;
        file.new_attr::<u64>()
            .create("creation_timestamp")
            .and_then(|a| a.write_scalar(&created_ms))
            .map_err(&e)?;
        s(&file, "application_name", &self.application).map_err(&e)?;
        s(&file, "filelayout_params", &layout_params_json()).map_err(&e)?;
        file.new_attr::<u32>()
            .create("filelayout_version")
            .and_then(|a| a.write_scalar(&FILELAYOUT_VERSION))
            .map_err(&e)?;
        s(&file, "source_id_geo_id_map", &self.geo_map).map_err(&e)?;
        s(&file, "record_type", "TimeSlice").map_err(&e)?;
        s(
            &file,
            "operational_environment",
            &self.opts.operational_environment,
        )
        .map_err(&e)?;
        s(&file, "offline_data_stream", &self.opts.offline_data_stream).map_err(&e)?;
        let test = if self.opts.run_was_for_test_purposes {
            "true"
        } else {
            "false"
        };
        s(&file, "run_was_for_test_purposes", test).map_err(&e)?;
        Ok(OpenFile {
            file,
            writing,
            done,
            recorded: 0,
            filter: self.opts.filter,
        })
    }

    /// Writes the closing attributes, closes, makes the file durable and gives it its name.
    fn close(&mut self, f: OpenFile) -> Result<PathBuf, ConvertError> {
        let e = h5err(&f.writing);
        f.file
            .new_attr::<u64>()
            .create("recorded_size")
            .and_then(|a| a.write_scalar(&f.recorded))
            .map_err(&e)?;
        f.file
            .new_attr::<u64>()
            .create("closing_timestamp")
            .and_then(|a| a.write_scalar(&now_ms()))
            .map_err(&e)?;
        f.file.flush().map_err(&e)?;
        f.file.close().map_err(&e)?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |cause| ConvertError::Io { path, cause }
        };
        std::fs::File::open(&f.writing)
            .and_then(|h| h.sync_all())
            .map_err(io(&f.writing))?;
        if f.done.exists() {
            return Err(ConvertError::Exists(f.done));
        }
        std::fs::rename(&f.writing, &f.done).map_err(io(&f.done))?;
        if let Some(p) = self.created.iter_mut().find(|p| **p == f.writing) {
            *p = f.done.clone();
        }
        std::fs::File::open(&self.opts.out_dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.opts.out_dir))?;
        Ok(f.done)
    }
}

/// One TimeSlice record: its header, then each link's fragment streamed from the burst.
///
#[allow(clippy::too_many_arguments)]
fn write_record(
    f: &mut OpenFile,
    number: u64,
    begin: u64,
    end: u64,
    trigger_timestamp: u64,
    links: &[LinkSource],
    plan: &[FragmentPlan],
    frame_type: FrameType,
    run: u32,
) -> Result<(), ConvertError> {
    let e = h5err(&f.writing);
    let group_name = format!("TimeSlice{number:06}");
    let group = f.file.create_group(&group_name).map_err(&e)?;
    let raw = group.create_group("RawData").map_err(&e)?;
    let builder = SourceId {
        subsystem: Subsystem::TrBuilder,
        id: 0,
    };
    let tsh_name = format!("{}_TimeSliceHeader", builder.path_name());
    let tsh = TimeSliceHeader {
        timeslice_number: number,
        run_number: run,
        element_id: builder,
    };
    write_bytes(
        &raw,
        &tsh_name,
        &[&tsh.encode()],
        TimeSliceHeader::BYTES as u64,
    )
    .map_err(&e)?;
    let (type_code, type_name) = fragment_type(frame_type);
    let mut paths = vec![serde_json::json!({
        "subsys": builder.subsystem as u32, "id": builder.id,
        "path": format!("/{group_name}/RawData/{tsh_name}"),
    })];
    let fb = frame_type.frame_bytes() as u64;
    for (l, p) in links.iter().zip(plan) {
        let name = format!("{}_{type_name}", l.source_id.path_name());
        let header = FragmentHeader {
            size: FragmentHeader::BYTES as u64 + p.frames * fb,
            trigger_number: number,
            trigger_timestamp,
            window_begin: begin,
            window_end: end,
            run_number: run,
            status_bits: p.status_bits(),
            fragment_type: type_code,
            sequence_number: 0,
            detector_id: l.det_id as u16,
            element_id: l.source_id,
        };
        write_fragment(&raw, &name, &header, l, f)?;
        paths.push(serde_json::json!({
            "subsys": l.source_id.subsystem as u32, "id": l.source_id.id,
            "path": format!("/{group_name}/RawData/{name}"),
        }));
    }
    let sids: Vec<serde_json::Value> = links.iter().map(|l| l.source_id.json()).collect();
    let mut by_detector: std::collections::BTreeMap<u8, Vec<serde_json::Value>> =
        Default::default();
    for l in links {
        by_detector
            .entry(l.det_id)
            .or_default()
            .push(l.source_id.json());
    }
    let attrs = [
        ("record_header_source_id", builder.json().to_string()),
        ("source_id_path_map", serde_json::json!({ "map_entries": paths }).to_string()),
        (
            "fragment_type_source_id_map",
            serde_json::json!({ "map_entries": [{ "fragment_type": type_code, "sourceids": sids }] })
                .to_string(),
        ),
        (
            "subdetector_source_id_map",
            serde_json::json!({ "map_entries": by_detector.iter().map(|(d, s)| serde_json::json!({
                "subdetector": d, "sourceids": s })).collect::<Vec<_>>() })
            .to_string(),
        ),
    ];
    for (k, v) in attrs {
        let v: h5::types::VarLenUnicode = v.parse().expect("no NUL in JSON");
        group
            .new_attr::<h5::types::VarLenUnicode>()
            .create(k)
            .and_then(|a| a.write_scalar(&v))
            .map_err(&e)?;
    }
    Ok(())
}

/// One link's fragment of a record: its header, then its frames of the record's window streamed
/// from the burst. The frames must fill exactly the size the plan gave the header: anything
/// else means the burst changed under the conversion.
fn write_fragment(
    raw: &h5::Group,
    name: &str,
    header: &FragmentHeader,
    l: &LinkSource,
    f: &OpenFile,
) -> Result<(), ConvertError> {
    let e = h5err(&f.writing);
    let size = header.size;
    assert!(
        size >= FragmentHeader::BYTES as u64,
        "a fragment holds its header"
    );
    let changed = || ConvertError::Changed {
        path: l.reader.path.clone(),
        link: l.link,
        record: header.trigger_number,
    };
    let shaped = raw.new_dataset::<i8>().shape((size as usize, 1));
    let builder = match f.filter {
        Hdf5Filter::None => shaped,
        // A filter needs chunks: of FILTER_CHUNK_BYTES (no larger than the fragment).
        Hdf5Filter::BloscZstd => shaped
            .chunk(((size as usize).min(FILTER_CHUNK_BYTES), 1))
            .blosc_zstd(BLOSC_ZSTD_LEVEL, h5::filters::BloscShuffle::None),
    };
    let ds = builder.create(name).map_err(&e)?;
    write_at(&ds, 0, &header.encode()).map_err(&e)?;
    let mut at = FragmentHeader::BYTES as u64;
    l.reader
        .frames_between(header.window_begin, header.window_end, |frames: &[u8]| {
            if at + frames.len() as u64 > size {
                return Err(changed());
            }
            write_at(&ds, at, frames).map_err(&e)?;
            at += frames.len() as u64;
            Ok(())
        })?;
    if at != size {
        return Err(changed());
    }
    Ok(())
}

/// A dataset of `size` bytes (DUNE's: `char`, shape (size, 1)) holding `parts` back to back.
fn write_bytes(g: &h5::Group, name: &str, parts: &[&[u8]], size: u64) -> h5::Result<()> {
    let ds = g
        .new_dataset::<i8>()
        .shape((size as usize, 1))
        .create(name)?;
    let mut at = 0;
    for p in parts {
        write_at(&ds, at, p)?;
        at += p.len() as u64;
    }
    Ok(())
}

/// Writes `bytes` into the byte dataset `ds` from `offset` on.
fn write_at(ds: &h5::Dataset, offset: u64, bytes: &[u8]) -> h5::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let signed: &[i8] = bytemuck::cast_slice(bytes);
    let view = ndarray::ArrayView2::from_shape((signed.len(), 1), signed)
        .expect("a column of the slice's length");
    let start = offset as usize;
    ds.write_slice(view, (start..start + bytes.len(), ..))
}

/// hdf5libs' layout parameters for TimeSlice records of detector readout fragments.
fn layout_params_json() -> String {
    serde_json::json!({
        "record_name_prefix": "TimeSlice",
        "digits_for_record_number": 6,
        "digits_for_sequence_number": 0,
        "record_header_dataset_name": "TimeSliceHeader",
        "raw_data_group_name": "RawData",
        "view_group_name": "Views",
        "path_param_list": [{
            "detector_group_type": "Detector_Readout",
            "detector_group_name": "TPC",
            "element_name_prefix": "Link",
            "digits_for_element_number": 5
        }]
    })
    .to_string()
}

/// The file-level map from each link's SourceID to its geo id.
fn geo_map_json(links: &[LinkSource]) -> String {
    serde_json::json!({
        "map_entries": links.iter().map(|l| serde_json::json!({
            "subsys": l.source_id.subsystem as u32, "id": l.source_id.id, "geoids": [l.geo_id],
        })).collect::<Vec<_>>()
    })
    .to_string()
}
