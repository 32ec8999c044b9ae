//! Which code decodes: the portable one, or vector instructions the CPU running it has (chosen
//! once, at run time, so that one build runs on any x86-64 and on other machines).

/// A set of instructions the codec's inner loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstructionSet {
    /// Any CPU.
    Portable,
    /// x86-64 with AVX-512 F, BW, VBMI and VBMI2 (Intel Ice Lake and AMD Zen 4 onwards).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl std::fmt::Display for InstructionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InstructionSet::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            InstructionSet::Avx512 => "avx512",
        })
    }
}

impl InstructionSet {
    /// The fastest this CPU runs; `SNBUF_CODEC_KERNEL=portable` holds it to the portable one
    /// (to compare them, or should a CPU's vector unit be suspect).
    pub fn detect() -> InstructionSet {
        if std::env::var_os("SNBUF_CODEC_KERNEL").is_some_and(|v| v == "portable") {
            return InstructionSet::Portable;
        }
        InstructionSet::Avx512.or_portable()
    }

    /// This set if the CPU has every instruction its code is compiled for, else the portable
    /// one: so that a caller's choice can never run an instruction the CPU lacks.
    pub fn or_portable(self) -> InstructionSet {
        match self {
            #[cfg(target_arch = "x86_64")]
            InstructionSet::Avx512
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vbmi")
                    && std::arch::is_x86_feature_detected!("avx512vbmi2")
                    && std::arch::is_x86_feature_detected!("bmi1")
                    && std::arch::is_x86_feature_detected!("bmi2")
                    && std::arch::is_x86_feature_detected!("popcnt")
                    && std::arch::is_x86_feature_detected!("lzcnt") =>
            {
                InstructionSet::Avx512
            }
            _ => InstructionSet::Portable,
        }
    }
}
