//! DUNE-DAQ's record structures, byte for byte, as its offline tools read them: the release
//! [`DUNE_RELEASE`] names (daqdataformats `FragmentHeader.hpp` version 6 with its status bits,
//! `TimeSliceHeader.hpp` version 2, `SourceID.hpp`; detdataformats `DetID.hpp`). All
//! little-endian. Pinned by hand-written bytes in the tests below, written from DUNE's headers,
//! not from this encoder.

use snbuf_frames::FrameType;

/// The DUNE-DAQ release these structures and the HDF5 files follow, and the public commits of
/// its packages they were checked against (docs/FORMAT.md, "Which DUNE release").
pub const DUNE_RELEASE: &str = "fddaq-coredaq-v5.7.1";
/// daqdataformats: FragmentHeader version 6, `status_bits`, fragment types up to 19.
pub const DAQDATAFORMATS_COMMIT: &str = "5bce4dfd82864d9a6a2e8558ee94ea123b3c26b7";
/// hdf5libs: file layout version 6, creation and closing times as integers (ms).
pub const HDF5LIBS_COMMIT: &str = "036adeb592596b024ce8d2f7d5e4de8be1163eaf";

/// A DUNE SourceID: what produced a piece of data. 8 bytes: version (2), subsystem, id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceId {
    pub subsystem: Subsystem,
    pub id: u32,
}

/// SourceID subsystems.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subsystem {
    DetectorReadout = 1,
    TrBuilder = 4,
}

impl SourceId {
    pub const VERSION: u16 = 2;
    pub const BYTES: usize = 8;

    pub fn readout(id: u32) -> SourceId {
        SourceId {
            subsystem: Subsystem::DetectorReadout,
            id,
        }
    }

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..2].copy_from_slice(&Self::VERSION.to_le_bytes());
        b[2..4].copy_from_slice(&(self.subsystem as u16).to_le_bytes());
        b[4..8].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    /// As DUNE names it in dataset paths: `Detector_Readout_0x0000002a`.
    pub fn path_name(&self) -> String {
        let subsystem = match self.subsystem {
            Subsystem::DetectorReadout => "Detector_Readout",
            Subsystem::TrBuilder => "TR_Builder",
        };
        format!("{subsystem}_0x{:08x}", self.id)
    }

    /// As hdf5libs writes one into its JSON maps.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "subsys": self.subsystem as u32, "id": self.id })
    }
}

/// DUNE's fragment type of a frame type, and its name in dataset paths.
/// The frame type keeps the table (`FrameType::fragment_type`); a custom frame is `kUnknown`.
pub fn fragment_type(t: FrameType) -> (u32, &'static str) {
    t.fragment_type().unwrap_or((0, "Unknown"))
}

/// FragmentHeader `status_bits` (daqdataformats `FragmentStatusBits`): bit numbers. snbuf sets
/// only the two a converted burst can know; the others are named so that a reader of this code
/// sees what each bit of a DUNE file means.
pub mod status_bit {
    /// The latency buffer was empty when the data was requested.
    pub const LATENCY_BUFFER_EMPTY: u32 = 0;
    /// Only part of the requested data is in the fragment.
    pub const INCOMPLETE: u32 = 1;
    /// The requested window was too large.
    pub const INVALID_REQUEST_WINDOW: u32 = 2;
    pub const REQUEST_TIMEOUT: u32 = 3;
    pub const REQUEST_WINDOW_BEFORE_BUFFER: u32 = 4;
    pub const REQUEST_WINDOW_AFTER_BUFFER: u32 = 5;
    /// The fragment holds no data.
    pub const EMPTY_FRAGMENT: u32 = 6;
}

/// `status_bits` of a fragment with some of its frames missing.
pub const INCOMPLETE: u32 = 1 << status_bit::INCOMPLETE;
/// `status_bits` of a fragment with none of its frames: empty, and so also incomplete.
pub const EMPTY: u32 = (1 << status_bit::EMPTY_FRAGMENT) | INCOMPLETE;

/// daqdataformats' FragmentHeader, version 6: 72 bytes before the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Header and payload, bytes.
    pub size: u64,
    pub trigger_number: u64,
    pub trigger_timestamp: u64,
    /// The time the fragment covers, [begin, end) in ticks.
    pub window_begin: u64,
    pub window_end: u64,
    pub run_number: u32,
    pub status_bits: u32,
    pub fragment_type: u32,
    pub sequence_number: u16,
    pub detector_id: u16,
    pub element_id: SourceId,
}

impl FragmentHeader {
    pub const MARKER: u32 = 0x1111_2222;
    pub const VERSION: u32 = 6;
    pub const BYTES: usize = 72;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&Self::MARKER.to_le_bytes());
        b[4..8].copy_from_slice(&Self::VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.trigger_number.to_le_bytes());
        b[24..32].copy_from_slice(&self.trigger_timestamp.to_le_bytes());
        b[32..40].copy_from_slice(&self.window_begin.to_le_bytes());
        b[40..48].copy_from_slice(&self.window_end.to_le_bytes());
        b[48..52].copy_from_slice(&self.run_number.to_le_bytes());
        b[52..56].copy_from_slice(&self.status_bits.to_le_bytes());
        b[56..60].copy_from_slice(&self.fragment_type.to_le_bytes());
        b[60..62].copy_from_slice(&self.sequence_number.to_le_bytes());
        b[62..64].copy_from_slice(&self.detector_id.to_le_bytes());
        b[64..72].copy_from_slice(&self.element_id.encode());
        b
    }
}

/// daqdataformats' TimeSliceHeader, version 2: 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeSliceHeader {
    pub timeslice_number: u64,
    pub run_number: u32,
    pub element_id: SourceId,
}

impl TimeSliceHeader {
    pub const MARKER: u32 = 0x5555_6666;
    pub const VERSION: u32 = 2;
    pub const BYTES: usize = 32;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&Self::MARKER.to_le_bytes());
        b[4..8].copy_from_slice(&Self::VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.timeslice_number.to_le_bytes());
        b[16..20].copy_from_slice(&self.run_number.to_le_bytes());
        b[20..24].copy_from_slice(&0xFFFF_FFFFu32.to_le_bytes());
        b[24..32].copy_from_slice(&self.element_id.encode());
        b
    }
}

/// hdf5libs' geo id of a link: stream << 48 | slot << 32 | crate << 16 | detector.
pub fn geo_id(det_id: u8, crate_id: u16, slot_id: u8, stream_id: u8) -> u64 {
    ((stream_id as u64) << 48)
        | ((slot_id as u64) << 32)
        | ((crate_id as u64) << 16)
        | det_id as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fragment_header_is_dunes_72_bytes() {
        let h = FragmentHeader {
            size: 72 + 7200,
            trigger_number: 7,
            trigger_timestamp: 0x0102_0304_0506_0708,
            window_begin: 1000,
            window_end: 3048,
            run_number: 1234,
            status_bits: INCOMPLETE,
            fragment_type: 12,
            sequence_number: 0,
            detector_id: 3,
            element_id: SourceId::readout(42),
        };
        // Written by hand from FragmentHeader.hpp (version 6; the offsets of its static_asserts
        // in detail/FragmentHeader.hxx), little-endian.
        let golden: [u8; 72] = [
            0x22, 0x22, 0x11, 0x11, // marker 0x11112222
            6, 0, 0, 0, // version 6
            0x68, 0x1c, 0, 0, 0, 0, 0, 0, // size 7272
            7, 0, 0, 0, 0, 0, 0, 0, // trigger_number
            8, 7, 6, 5, 4, 3, 2, 1, // trigger_timestamp
            0xe8, 0x03, 0, 0, 0, 0, 0, 0, // window_begin 1000
            0xe8, 0x0b, 0, 0, 0, 0, 0, 0, // window_end 3048
            0xd2, 0x04, 0, 0, // run_number 1234
            0x02, 0, 0, 0, // status_bits: kIncomplete = 1
            12, 0, 0, 0, // fragment_type kWIBEth
            0, 0, // sequence_number
            3, 0, // detector_id kHD_TPC
            2, 0, 1, 0, 42, 0, 0, 0, // SourceID v2, Detector_Readout, 42
        ];
        assert_eq!(h.encode(), golden);
        assert_eq!(
            SourceId::readout(42).path_name(),
            "Detector_Readout_0x0000002a"
        );
        // An empty fragment: kEmptyFragment = 6 and kIncomplete = 1, nothing at bit 0
        // (kLatencyBufferEmpty, which says something of the buffer, not of the fragment).
        let empty = FragmentHeader {
            status_bits: EMPTY,
            ..h
        };
        assert_eq!(empty.encode()[52..56], [0x42, 0, 0, 0]);
    }

    #[test]
    fn fragment_types_are_dunes_codes_and_names() {
        // From FragmentHeader.hpp's FragmentType and get_fragment_type_names().
        for (t, code, name) in [
            (FrameType::ProtoDuneWib, 1, "ProtoWIB"),
            (FrameType::Wib2, 2, "WIB"),
            (FrameType::WibEth, 12, "WIBEth"),
            (FrameType::TdeEth, 15, "TDEEth"),
            (FrameType::DaphneEthStream, 19, "DAPHNEEthStream"),
        ] {
            assert_eq!(fragment_type(t), (code, name), "{t}");
            assert_eq!(t.fragment_type(), Some((code, name)), "{t}");
        }
        let custom = FrameType::Custom {
            frame_bytes: 64,
            ticks_per_frame: 1,
            timestamp_offset: 0,
        };
        assert_eq!(fragment_type(custom), (0, "Unknown"));
    }

    #[test]
    fn a_timeslice_header_is_dunes_32_bytes() {
        let h = TimeSliceHeader {
            timeslice_number: 3,
            run_number: 1234,
            element_id: SourceId {
                subsystem: Subsystem::TrBuilder,
                id: 0,
            },
        };
        let golden: [u8; 32] = [
            0x66, 0x66, 0x55, 0x55, 2, 0, 0, 0, // marker, version
            3, 0, 0, 0, 0, 0, 0, 0, // timeslice_number
            0xd2, 0x04, 0, 0, 0xff, 0xff, 0xff, 0xff, // run_number, padding
            2, 0, 4, 0, 0, 0, 0, 0, // SourceID v2, TR_Builder, 0
        ];
        assert_eq!(h.encode(), golden);
    }

    #[test]
    fn geo_ids_pack_as_hdf5libs_does() {
        assert_eq!(geo_id(3, 1, 2, 5), 0x0005_0002_0001_0003);
    }
}
