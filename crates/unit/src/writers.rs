//! The writer threads of a burst: how many, where they run (pinned, near their links' device),
//! which links each takes (link l to writer l mod writers), and their CPU time. What each does
//! is `window_writer`.

use std::sync::Arc;
use std::thread::JoinHandle;

use snbuf_platform::cpu;
use snbuf_readout::LatencyBuffer;

use crate::counters::LiveLink;
use crate::error::RecordError;
use crate::watchdog::{give_up_link, WriterWatch};
use crate::window_job::{DynLink, WindowJob};
use crate::window_writer::write_window;

/// Writers yield the CPU to the link emulation where it could not raise its own priority (see
/// `unit::LINKS_NICE`).
const WRITERS_NICE: i32 = 10;

/// The running writer threads of one burst, and their watchdogs.
pub(crate) struct Writers {
    handles: Vec<JoinHandle<(Vec<DynLink>, f64)>>,
    watches: Vec<Arc<WriterWatch>>,
    live: Arc<Vec<LiveLink>>,
    job: WindowJob,
}

/// Where each writer thread runs.
pub(crate) struct WriterPlacement<'a> {
    pub writers: usize,
    /// CPUs to pin to: writer w takes `cpus[(1 + w) % len]` (the first runs the links)...
    pub cpus: &'a [usize],
    /// ...unless its links' device is on a NUMA node with CPUs of its own: then one of those
    /// (`near[w]`, empty for no preference; see `near_cpus`).
    pub near: &'a [Vec<usize>],
    /// Whether the link emulation got its higher priority (else the writers lower theirs).
    pub links_favoured: bool,
}

/// Per writer, the CPUs on the NUMA node its links' buffers and device are on (empty: no
/// preference): writer w has links l with l mod writers = w, and `link_nodes[l]` is link l's node
/// (`Unit::start` placed its buffer there; None on a one-node machine or an unknown device).
/// Only a writer whose links are all on one known node gets a preference.
pub(crate) fn near_cpus(
    writers: usize,
    link_nodes: &[Option<u32>],
    allowed: &[usize],
) -> Vec<Vec<usize>> {
    assert!(writers > 0, "a burst has writers");
    if link_nodes.iter().all(Option::is_none) {
        return vec![Vec::new(); writers];
    }
    let nodes = snbuf_platform::numa::nodes();
    let near: Vec<Vec<usize>> = (0..writers)
        .map(|w| {
            snbuf_platform::numa::cpus_near(writer_node(w, writers, link_nodes), &nodes, allowed)
        })
        .collect();
    assert_eq!(near.len(), writers, "a preference per writer");
    near
}

/// The node all of writer w's links are on, if they are all on one known node.
fn writer_node(w: usize, writers: usize, link_nodes: &[Option<u32>]) -> Option<u32> {
    debug_assert!(w < writers, "writer {w} of {writers}");
    let mut on = link_nodes
        .iter()
        .enumerate()
        .filter(|(l, _)| l % writers == w)
        .map(|(_, n)| *n);
    let first = on.next()??;
    on.all(|n| n == Some(first)).then_some(first)
}

/// Link `l` to writer `l % writers`: links 0..n and no more writers than links, so writer `w`
/// has link `w` at least.
fn links_per_writer(links: Vec<DynLink>, writers: usize) -> Vec<Vec<DynLink>> {
    let mut per_writer: Vec<Vec<DynLink>> = (0..writers).map(|_| Vec::new()).collect();
    for lw in links {
        per_writer[lw.link() as usize % writers].push(lw);
    }
    assert!(
        per_writer.iter().all(|l| !l.is_empty()),
        "every writer has a link"
    );
    per_writer
}

impl WriterPlacement<'_> {
    /// The CPU writer `w` runs on: one near its links' device where that is known, else the
    /// next of the unit's CPUs after the first (the links' thread's).
    fn cpu_of_writer(&self, w: usize) -> usize {
        debug_assert!(w < self.writers, "writer {w} of {}", self.writers);
        match self.near.get(w) {
            Some(near) if !near.is_empty() => near[w % near.len()],
            _ => self.cpus[(1 + w) % self.cpus.len()],
        }
    }
}

impl Writers {
    /// Starts `placement.writers` threads; link `l` goes to writer `l % writers`, reading
    /// `buffers[l]` and updating `live[l]`.
    pub fn start(
        links: Vec<DynLink>,
        buffers: &[LatencyBuffer],
        live: &Arc<Vec<LiveLink>>,
        job: &WindowJob,
        placement: WriterPlacement<'_>,
    ) -> Result<Writers, RecordError> {
        assert_eq!(links.len(), buffers.len(), "a link writer per buffer");
        assert_eq!(live.len(), buffers.len(), "live counters per link");
        assert!(
            placement.writers > 0 && !placement.cpus.is_empty(),
            "writers, and CPUs to run them on"
        );
        let per_writer = links_per_writer(links, placement.writers);
        let mut handles = Vec::new();
        let mut watches = Vec::new();
        for (w, links) in per_writer.into_iter().enumerate() {
            let watch = WriterWatch::new(&links);
            watches.push(watch.clone());
            let cpu_id = placement.cpu_of_writer(w);
            let links_favoured = placement.links_favoured;
            let bufs: Vec<LatencyBuffer> = links
                .iter()
                .map(|l| buffers[l.link() as usize].clone())
                .collect();
            let live = live.clone();
            let job = job.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("snbuf-writer{w}"))
                .spawn(move || {
                    let span =
                        tracing::info_span!("burst", unit = %job.unit_id, burst = %job.burst_id);
                    let _in_burst = span.enter();
                    let _ = cpu::pin_current_thread(cpu_id);
                    if !links_favoured {
                        let _ = cpu::set_current_thread_nice(WRITERS_NICE);
                    }
                    let cpu0 = cpu::thread_cpu_seconds();
                    let links = write_window(links, &bufs, &live, &job, &watch);
                    (links, cpu::thread_cpu_seconds() - cpu0)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(cause) => {
                    // Let the running writers finish what they persist; the burst is left
                    // unsealed, which `snbuf recover` turns into a valid one.
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(RecordError::Thread {
                        thread: format!(
                            "writer {w} (the burst is left unsealed: run `snbuf recover`)"
                        ),
                        cause,
                    });
                }
            }
        }
        assert_eq!(handles.len(), placement.writers, "every writer runs");
        Ok(Writers {
            handles,
            watches,
            live: live.clone(),
            job: job.clone(),
        })
    }

    /// Whether a writer is still at work (one the watchdog gave up is not waited for).
    pub fn running(&self) -> bool {
        self.handles
            .iter()
            .zip(&self.watches)
            .any(|(h, w)| !h.is_finished() && !w.given_up())
    }

    /// The watchdog's look: a writer still at work that has not beaten for longer than
    /// `allowed` is stuck in a call on its device, and given up: its links are failed now
    /// (status and metrics show it), and `join` seals them as they stood at their last
    /// acknowledgement. Returns how many writers it gave up this time.
    pub fn watch(&self, allowed: std::time::Duration) -> usize {
        let mut given_up = 0;
        for (h, w) in self.handles.iter().zip(&self.watches) {
            if h.is_finished() || w.given_up() || w.silent_for() <= allowed {
                continue;
            }
            w.give_up();
            given_up += 1;
            let links: Vec<u32> = w.last_acknowledged().iter().map(|l| l.link()).collect();
            tracing::error!(
                ?links,
                silent_s = w.silent_for().as_secs_f64(),
                "a writer is stuck in a call on its device: its links are failed, the rest of \
                 their windows counted lost, and the burst is sealed without it"
            );
            for l in links {
                self.live[l as usize].fail();
            }
        }
        given_up
    }

    /// Waits for every writer not given up; returns every link (those of a writer given up as
    /// they stood at their last acknowledgement, failed, their loss counted) and the CPU
    /// seconds the writers that ended used.
    pub fn join(self, dir: &std::path::Path) -> Result<(Vec<DynLink>, f64), RecordError> {
        let mut links = Vec::new();
        let mut cpu_s = 0.0;
        for (h, w) in self.handles.into_iter().zip(&self.watches) {
            if w.given_up() {
                // Left to itself (dropping the handle detaches it): it touches nothing more. If
                // its call did return meanwhile, it stopped where it was, its window unfinished:
                // its links are sealed as given up all the same.
                if h.is_finished() {
                    let _ = h.join();
                }
                for mut lw in w.last_acknowledged() {
                    let live = &self.live[lw.link() as usize];
                    give_up_link(&mut lw, live, &self.job, w.silent_for());
                    links.push(lw);
                }
                continue;
            }
            let (l, cpu) = h.join().map_err(|_| RecordError::WriterPanicked {
                dir: dir.to_path_buf(),
            })?;
            links.extend(l);
            cpu_s += cpu;
        }
        assert_eq!(
            links.len(),
            self.live.len(),
            "every link of the burst comes back to be sealed"
        );
        Ok((links, cpu_s))
    }
}

#[cfg(test)]
mod tests {
    use super::writer_node;

    #[test]
    fn a_writer_prefers_a_node_only_when_all_its_links_are_there() {
        // Links 0..4 on two outputs (l mod 2): node 0 for even links, node 1 for odd ones.
        let nodes = [Some(0), Some(1), Some(0), Some(1)];
        assert_eq!(writer_node(0, 2, &nodes), Some(0));
        assert_eq!(writer_node(1, 2, &nodes), Some(1));
        assert_eq!(writer_node(0, 1, &nodes), None, "one writer for both nodes");
        assert_eq!(writer_node(0, 2, &[None, Some(1)]), None, "node unknown");
        assert_eq!(
            writer_node(3, 4, &nodes[..2]),
            None,
            "a writer with no link"
        );
    }
}
