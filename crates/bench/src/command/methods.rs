//! `snbuf methods`: the persistence methods and what this machine and build can do.

use snbuf_console::say;
use std::path::Path;

use anyhow::Context;
use snbuf_persist::{medium, METHODS};
use snbuf_platform::cpu::CpuFeatures;

use snbuf_console::Table;

pub fn run(target: Option<&Path>) -> anyhow::Result<()> {
    let cpu = CpuFeatures::detect();
    say!(
        "CPU: {} non-temporal stores; flushes: {}",
        cpu.simd_path().map(|p| p.name()).unwrap_or("no"),
        cpu.flag_names()
            .into_iter()
            .filter(|f| f.starts_with("cl"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut t = Table::new(&[
        ("method", false),
        ("available", false),
        ("what it does", false),
    ]);
    for m in &METHODS {
        let available = if !m.method.compiled_in() {
            "no: build with --features pmdk".to_string()
        } else {
            match m.method {
                snbuf_persist::Method::Clwb if !cpu.clwb => "no: CPU lacks CLWB".into(),
                snbuf_persist::Method::Clflushopt if !cpu.clflushopt => {
                    "no: CPU lacks CLFLUSHOPT".into()
                }
                _ => "yes".into(),
            }
        };
        t.row(vec![m.name.to_string(), available, m.summary.to_string()]);
    }
    snbuf_console::out::say_text(&t.render());
    if let Some(path) = target {
        let m = medium::probe(path).with_context(|| format!("probe {}", path.display()))?;
        say!("\n{}: {}", path.display(), m.describe());
        if m.dax {
            say!("  mapped methods map with MAP_SYNC: a fence makes stores durable (persistent memory)");
        } else if m.volatile {
            say!("  RAM only: mapped methods run the pmem instructions, but nothing survives power loss");
        } else {
            say!("  not DAX: mapped methods need msync for durability; direct/uring are the fast durable path");
        }
    }
    Ok(())
}
