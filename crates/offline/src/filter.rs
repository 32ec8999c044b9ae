//! The HDF5 filter `convert --to dune-hdf5` stores a fragment's bytes through: none, as DUNE's
//! own files, or one of the standard filters an analysis reads with hdf5plugin, chosen by
//! measurement (`snbuf bench codec`'s byte-dataset peers).

use clap::ValueEnum;

/// The HDF5 filter a fragment's bytes are stored through, as `--filter` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Hdf5Filter {
    /// None: contiguous bytes, as DUNE's own files (any HDF5 reads them).
    #[default]
    None,
    /// Blosc with zstd (HDF5 filter 32001), chunks of 1 MiB: about 23 % smaller on the
    /// detector's noise; read with h5py after `import hdf5plugin` (or HDF5_PLUGIN_PATH).
    BloscZstd,
}
