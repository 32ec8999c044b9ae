//! What a unit makes ready before its links start: its outputs, and each link's latency
//! buffer on the right NUMA node.

use snbuf_readout::{latency_buffer_on_node, LatencyBuffer, Producer};

use crate::config::RecordConfig;
use crate::error::RecordError;

/// Every output directory exists, and holds no preparation a crashed process left (they hold
/// no data; this unit's start prepares anew).
pub(super) fn prepare_outputs(config: &RecordConfig) -> Result<(), RecordError> {
    for output in config.outputs() {
        let dir_error = |what, cause| RecordError::OutputDir {
            what,
            path: output.clone(),
            cause,
        };
        std::fs::create_dir_all(&output).map_err(|e| dir_error("create output directory", e))?;
        snbuf_burst::opening::prepared::remove_stale(&output).map_err(|e| dir_error("clean", e))?;
    }
    Ok(())
}

/// Per link: the producer that fills its buffer, the buffer, and the NUMA node it is on.
pub(super) type LinkBuffers = (Vec<Producer>, Vec<LatencyBuffer>, Vec<Option<u32>>);

/// Each link's latency buffer, prefaulted at once (buffers that cannot fit in memory are
/// refused rather than killed filling them), with its producer and the NUMA node it is on.
/// On a machine with several NUMA nodes each link's buffer lives on the node of the device it
/// is written to (link l goes to output l mod N): the device's DMA and the writer pinned near it
/// (`writers::near_cpus`) then read it without crossing sockets.
pub(super) fn allocate_buffers(config: &RecordConfig) -> Result<LinkBuffers, RecordError> {
    let buffer_bytes = config.buffer_frames() * config.frame_bytes() * config.links as u64;
    if let Some(available) = snbuf_persist::medium::memory_available_bytes() {
        if buffer_bytes > available {
            return Err(RecordError::NotEnoughMemory {
                need_bytes: buffer_bytes,
                available_bytes: available,
            });
        }
    }
    let nodes = snbuf_platform::numa::nodes();
    let output_nodes: Vec<Option<u32>> = config
        .outputs()
        .iter()
        .map(|o| snbuf_platform::numa::memory_node(snbuf_platform::numa::node_of_path(o), &nodes))
        .collect();
    let buffer_nodes: Vec<Option<u32>> = (0..config.links as usize)
        .map(|l| output_nodes[l % output_nodes.len()])
        .collect();
    let (mut producers, mut buffers) = (Vec::new(), Vec::new());
    for link in 0..config.links {
        let (mut p, b) = latency_buffer_on_node(
            config.frame_type.layout(),
            config.buffer_frames(),
            config.page_size,
            buffer_nodes[link as usize],
        )
        .map_err(|cause| RecordError::Buffer { link, cause })?;
        // The links checksum each frame in their cache for writers that send frames to a
        // block device without reading them; a writer to mapped memory checksums what its
        // copy just read, and the links keep their CPU.
        p.set_frame_checksums(!config.method.capabilities().mapped);
        producers.push(p);
        buffers.push(b);
    }
    Ok((producers, buffers, buffer_nodes))
}
