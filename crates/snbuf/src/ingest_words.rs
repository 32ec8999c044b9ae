//! How the terminal words the network receiver's placement, the same in `record`'s summary and
//! in `status`: the CPU its thread runs on, the interface it listens on, its nap between polls.

use std::time::Duration;

/// "on CPU 0, interface lo (no NUMA node); sleeps up to 500 us between polls". `nic` is the
/// interface as `Nic` displays it; None: bound to every interface.
pub fn receiver(cpu: Option<usize>, nic: Option<&str>, nap: Duration) -> String {
    format!(
        "on CPU {}, {}; {}",
        cpu.map_or("?".into(), |c| c.to_string()),
        nic.map_or("every interface (0.0.0.0)".into(), |n| format!(
            "interface {n}"
        )),
        if nap.is_zero() {
            "never sleeps between polls (--receive-nap off)".into()
        } else {
            format!("sleeps up to {} us between polls", nap.as_micros())
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_is_worded_with_its_cpu_interface_and_nap() {
        assert_eq!(
            receiver(
                Some(3),
                Some("eth1 (NUMA node 1)"),
                Duration::from_micros(500)
            ),
            "on CPU 3, interface eth1 (NUMA node 1); sleeps up to 500 us between polls"
        );
        assert_eq!(
            receiver(None, None, Duration::ZERO),
            "on CPU ?, every interface (0.0.0.0); never sleeps between polls (--receive-nap off)"
        );
    }
}
