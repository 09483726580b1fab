//! The GPUs the planner knows: memory, generation and dense bf16 throughput.

const MIB: u64 = 1024 * 1024;

/// A GPU the planner can plan for.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCard {
    pub name: String,
    pub memory_bytes: u64,
    /// Chip generation, for precision advice ("Ada", "Ampere", "Hopper", ...).
    pub architecture: String,
    /// Dense bf16 tensor throughput with fp32 accumulation, TFLOP/s.
    pub dense_bf16_tflops: f64,
}

/// (name, MiB as NVML reports it, generation, dense bf16 TFLOP/s) from NVIDIA's datasheets.
const CARD_TABLE: [(&str, u64, &str, f64); 8] = [
    ("RTX 4090", 24_564, "Ada", 165.2),
    ("RTX 3090", 24_576, "Ampere", 71.0),
    ("RTX 4080", 16_376, "Ada", 97.5),
    ("RTX 5090", 32_607, "Blackwell", 209.5),
    ("A100 40GB", 40_960, "Ampere", 312.0),
    ("A100 80GB", 81_920, "Ampere", 312.0),
    ("H100 80GB", 81_559, "Hopper", 989.4),
    ("L40S", 46_068, "Ada", 362.1),
];

/// Every card in the built-in list.
pub fn cards() -> Vec<GpuCard> {
    CARD_TABLE
        .iter()
        .map(|&(name, mib, architecture, tflops)| GpuCard {
            name: name.to_string(),
            memory_bytes: mib * MIB,
            architecture: architecture.to_string(),
            dense_bf16_tflops: tflops,
        })
        .collect()
}

/// The built-in card with this name (case and spaces ignored: "rtx4090", "A100 80GB").
pub fn card(name: &str) -> Option<GpuCard> {
    let wanted: String = name
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_lowercase();
    cards()
        .into_iter()
        .find(|card| card.name.replace(' ', "").to_lowercase() == wanted)
}

/// The built-in card a detected GPU is (its memory as the driver reports it), or a card with the
/// GPU's own name, memory and generation and an RTX 4090's throughput when it is not listed.
/// The planner takes the three facts, not a device type: it knows nothing of drivers.
pub fn card_for_gpu(name: &str, memory_total_bytes: u64, architecture: Option<&str>) -> GpuCard {
    let listed = cards().into_iter().find(|card| name.contains(&card.name));
    match listed {
        Some(card) => GpuCard {
            memory_bytes: memory_total_bytes,
            ..card
        },
        None => GpuCard {
            name: name.to_string(),
            memory_bytes: memory_total_bytes,
            architecture: architecture.unwrap_or_default().to_string(),
            dense_bf16_tflops: CARD_TABLE[0].3,
        },
    }
}

/// Whether the generation has fast bf16 tensor cores (Ampere and later).
pub fn supports_bf16(architecture: &str) -> bool {
    matches!(architecture, "Ampere" | "Ada" | "Hopper" | "Blackwell")
}
