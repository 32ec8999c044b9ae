//! A burst for offline analysis. DUNE's offline tools read HDF5 raw-data files in the layout
//! of DUNE-DAQ's hdf5libs (`hdf5`, with the `hdf5` feature), and raw frame files as its readout
//! writes them (`extract`), its fragments through an HDF5 filter if asked (`filter`). The record
//! structures are DUNE's, byte for byte (`dune`); how a window is cut into records is `plan`.
//! Frames pass through unchanged.
#![forbid(unsafe_code)]

pub mod command;
pub mod dune;
pub mod extract;
pub mod filter;
#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod inspect;
pub mod plan;

pub use extract::{extract, ExtractError, Extracted};
