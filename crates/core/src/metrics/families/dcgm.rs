//! dcgm-exporter's default families (etc/default-counters.csv): the same names, types, help
//! texts and units, and the PCIe link and clock-event-reason fields DCGM names.

use super::{Collect, gauge, read};
use crate::metrics::exposition::{Family, Kind, Value};
use gputune_formats::units::BYTES_PER_MIB;

pub(super) const FAMILIES: &[(Family, Collect)] = &[
    (
        gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
        |gpu, out| out.one(read(gpu, |r| r.sm_clock_mhz)),
    ),
    (
        gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
        |gpu, out| out.one(read(gpu, |r| r.memory_clock_mhz)),
    ),
    (
        gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
        |gpu, out| out.one(read(gpu, |r| r.temperature_c)),
    ),
    (
        gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
        |gpu, out| out.one(gpu.reading.and_then(|r| r.power_draw_mw).map(Value::watts)),
    ),
    (
        Family {
            name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            kind: Kind::Counter,
            help: "Total energy consumption since boot (in mJ).",
        },
        |gpu, out| {
            out.one(
                gpu.reading
                    .and_then(|r| r.energy_total_mj)
                    .map(Value::Integer),
            );
        },
    ),
    (
        gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
        |gpu, out| out.one(read(gpu, |r| r.utilization_gpu_pct)),
    ),
    (
        gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
        |gpu, out| out.one(read(gpu, |r| r.utilization_memory_pct)),
    ),
    (
        gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
        |gpu, out| {
            let total = gpu.info.identity.memory_total_bytes;
            let used = gpu.reading.and_then(|r| r.memory_used_bytes);
            out.one(used.map(|used| Value::Integer(total.saturating_sub(used) / BYTES_PER_MIB)));
        },
    ),
    (
        gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
        |gpu, out| {
            let used = gpu.reading.and_then(|r| r.memory_used_bytes);
            out.one(used.map(|used| Value::Integer(used / BYTES_PER_MIB)));
        },
    ),
    (
        gauge("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation."),
        |gpu, out| out.one(read(gpu, |r| r.pcie_link_gen)),
    ),
    (
        gauge("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width."),
        |gpu, out| out.one(read(gpu, |r| r.pcie_link_width)),
    ),
    (
        gauge("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "PCIe max link generation."),
        |gpu, out| out.one(read(gpu, |r| r.pcie_link_gen_max)),
    ),
    (
        gauge("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "PCIe max link width."),
        |gpu, out| out.one(read(gpu, |r| r.pcie_link_width_max)),
    ),
    (
        gauge(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "Current clock event reasons (bitmask of NVML's nvmlClocksEventReason values).",
        ),
        |gpu, out| {
            let reasons = gpu.reading.and_then(|r| r.throttle_reasons);
            out.one(reasons.map(|reasons| Value::Integer(reasons.bits())));
        },
    ),
];
