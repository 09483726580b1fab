//! `gputune status` as text: one block of lines per GPU.

use std::io::Write;

use crate::tuning::in_force::ControlsInForce;
use gputune_formats::reports::status::{GpuEntry, GpuStatus};
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::units::{energy, gib, mib_text, or_na, watts};
use gputune_formats::{card::GpuProcess, throttle::ThrottleReasons};

pub(super) fn write_text(
    out: &mut dyn Write,
    backend: &str,
    simulated_because: Option<&str>,
    entries: &[GpuEntry],
) -> std::io::Result<()> {
    match (backend, simulated_because) {
        ("sim", Some(reason)) => writeln!(out, "Simulated GPU (NVML unavailable: {reason})")?,
        ("sim", None) => writeln!(out, "Simulated GPU")?,
        _ => {}
    }
    for entry in entries {
        match entry {
            GpuEntry::Read(status) => write_gpu_text(out, status)?,
            GpuEntry::Failed(failure) => writeln!(out, "GPU {}: {}", failure.index, failure.error)?,
        }
    }
    Ok(())
}

/// One GPU's block: who it is, what could not be read, then its readings and holders.
fn write_gpu_text(out: &mut dyn Write, status: &GpuStatus) -> std::io::Result<()> {
    let identity = &status.identity;
    writeln!(
        out,
        "GPU {}  {}  {}  {}",
        identity.index,
        crate::text::printable(&identity.name),
        crate::text::printable(&identity.uuid),
        crate::text::printable(&identity.pci_bus_id)
    )?;
    if !status.not_read.is_empty() {
        writeln!(out, "  Not read     {}", status.not_read.join("; "))?;
    }
    if !status.has_readings {
        return Ok(());
    }
    write_readings_text(out, status)
}

/// The card's readings: power, temperature, fans, clocks, use, VRAM, P-state, throttle, PCIe
/// and energy.
fn write_readings_text(out: &mut dyn Write, status: &GpuStatus) -> std::io::Result<()> {
    let identity = &status.identity;
    let limits = &status.constraints;
    let reading = &status.telemetry;
    let power_range = match (limits.power_limit_min_mw, limits.power_limit_max_mw) {
        (Some(min), Some(max)) => format!(", range {}-{}", watts(min), watts(max)),
        _ => String::new(),
    };
    writeln!(
        out,
        "  Power        {} of {} limit (default {}{power_range})",
        or_na(reading.power_draw_mw, watts),
        or_na(reading.power_limit_mw, watts),
        or_na(limits.power_limit_default_mw, watts),
    )?;
    writeln!(
        out,
        "  Temperature  {}",
        or_na(reading.temperature_c, |c| format!("{c} °C"))
    )?;
    let fans = match &reading.fans {
        None => "n/a (no fans reported)".to_string(),
        Some(fans) => fans
            .iter()
            .map(|fan| {
                format!(
                    "{} ({})",
                    or_na(fan.speed_pct, |pct| format!("{pct} %")),
                    or_na(fan.speed_rpm, |rpm| format!("{rpm} RPM"))
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    writeln!(out, "  Fans         {fans}")?;
    let mhz = |value: Option<u32>| or_na(value, |mhz| format!("{mhz} MHz"));
    writeln!(
        out,
        "  Clocks       graphics {}, SM {}, memory {}",
        mhz(reading.gpu_clock_mhz),
        mhz(reading.sm_clock_mhz),
        mhz(reading.memory_clock_mhz)
    )?;
    let pct = |value: Option<u32>| or_na(value, |pct| format!("{pct} %"));
    writeln!(
        out,
        "  Utilization  GPU {}, memory {}",
        pct(reading.utilization_gpu_pct),
        pct(reading.utilization_memory_pct)
    )?;
    writeln!(
        out,
        "  VRAM         {} of {}",
        or_na(reading.memory_used_bytes, gib),
        gib(identity.memory_total_bytes)
    )?;
    writeln!(
        out,
        "  P-state      {}",
        or_na(reading.performance_state, |p| format!("P{p}"))
    )?;
    writeln!(
        out,
        "  Throttle     {}",
        ThrottleReasons::summary(reading.throttle_reasons)
    )?;
    let link = |generation: Option<u32>, width: Option<u32>| {
        format!(
            "Gen {} x{}",
            or_na(generation, |g| g.to_string()),
            or_na(width, |w| w.to_string())
        )
    };
    writeln!(
        out,
        "  PCIe         {} (max {})",
        link(reading.pcie_link_gen, reading.pcie_link_width),
        link(reading.pcie_link_gen_max, reading.pcie_link_width_max)
    )?;
    writeln!(
        out,
        "  Energy       {} since the driver loaded",
        or_na(reading.energy_total_mj, energy)
    )?;
    write_held_text(out, status)
}

/// What the card runs and who holds it: ECC errors, settings in force, the last crash, the
/// sessions and the processes.
fn write_held_text(out: &mut dyn Write, status: &GpuStatus) -> std::io::Result<()> {
    let reading = &status.telemetry;
    // Only cards with ECC on say it (datacenter cards); a GeForce card's line would be noise.
    if let Some(ecc) = reading.ecc {
        writeln!(
            out,
            "  ECC errors   {} corrected, {} uncorrected since the driver loaded",
            ecc.corrected_volatile, ecc.uncorrected_volatile
        )?;
    }
    if let Some(in_force) = &status.settings_in_force {
        writeln!(out, "  Settings     {}", settings_text(in_force))?;
        if let Some(offsets) = pstate_offsets_text(in_force) {
            writeln!(out, "  Offsets      {offsets}")?;
        }
    }
    if let Some(held) = &status.temperature_hold {
        writeln!(
            out,
            "  Temp hold    {}: {} (set by {})",
            held.hold.describe(),
            held.state.describe(),
            crate::text::printable(&held.set_by)
        )?;
    }
    if let Some(critical) = &status.last_critical {
        writeln!(
            out,
            "  Crash        {}: {}",
            gputune_formats::units::local_time(critical.at_ms, "%-d %b %H:%M:%S"),
            critical.sentence
        )?;
    }
    let job_pid = status
        .sessions
        .iter()
        .find_map(|session| session.holder.job_pid);
    for session in &status.sessions {
        let purpose = session.holder.purpose.as_str();
        // A check at the card's own settings holds no control: it is there to be seen.
        let holding = if session.holder.controls.is_empty() {
            "holding no control".to_string()
        } else {
            format!("holding the {}", session.holder.controls_text())
        };
        writeln!(
            out,
            "  Session      {purpose} {holding} by {}, since {}{}",
            crate::text::printable(&session.holder.by),
            gputune_formats::units::local_time(session.holder.since_ms, "%H:%M:%S"),
            session
                .energy_used_mj
                .map_or(String::new(), |used| format!(", {} used", energy(used)))
        )?;
    }
    write_processes_text(out, reading.processes.as_deref(), job_pid)
}

/// Every P-state's offsets, "GPU P0 +150, P2 +150, P8 +0 MHz; memory P0 +0, P2 +0, P8 +0 MHz
/// (training runs in P2)"; "unknown" for offsets not reported per P-state; `None` without
/// offsets.
fn pstate_offsets_text(in_force: &SettingsInForce) -> Option<String> {
    let list = |offsets: &[gputune_formats::card::PstateOffset]| {
        offsets
            .iter()
            .map(|offset| format!("P{} {:+}", offset.pstate, offset.offset_mhz))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !in_force.gpu_clock_offsets.is_empty() {
        parts.push(format!("GPU {} MHz", list(&in_force.gpu_clock_offsets)));
    }
    if !in_force.memory_clock_offsets.is_empty() {
        parts.push(format!(
            "memory {} MHz",
            list(&in_force.memory_clock_offsets)
        ));
    }
    if parts.is_empty() {
        // An offset without P-states: an older daemon's answer, or a driver that says none.
        let any_offset =
            in_force.gpu_clock_offset_mhz.is_some() || in_force.memory_clock_offset_mhz.is_some();
        return any_offset.then(|| "per P-state: unknown (not reported)".to_string());
    }
    let computes_in_p2 = in_force
        .gpu_clock_offsets
        .iter()
        .chain(&in_force.memory_clock_offsets)
        .any(|offset| offset.pstate == 2);
    let note = if computes_in_p2 {
        " (training runs in P2)"
    } else {
        ""
    };
    Some(format!("{}{note}", parts.join("; ")))
}

/// What the card runs, for the text: the summary, and what cannot be known about clock locks.
fn settings_text(in_force: &SettingsInForce) -> String {
    let mut text = in_force.summary();
    let unknown: Vec<&str> = [
        ("GPU", in_force.gpu_clock_lock),
        ("memory", in_force.memory_clock_lock),
    ]
    .into_iter()
    .filter(|(_, lock)| *lock == ClockLockInForce::Unknown)
    .map(|(clock, _)| clock)
    .collect();
    if !unknown.is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!(
            "{} clock lock{} not set by gputune this boot (NVML cannot read one set otherwise)",
            unknown.join(" and "),
            if unknown.len() > 1 { "s" } else { "" }
        ));
    }
    text
}

/// One line per process: pid, user, VRAM, kind and command.
fn write_processes_text(
    out: &mut dyn Write,
    processes: Option<&[GpuProcess]>,
    job_pid: Option<u32>,
) -> std::io::Result<()> {
    let processes = match processes {
        None => return writeln!(out, "  Processes    n/a (this GPU does not list them)"),
        Some([]) => return writeln!(out, "  Processes    none"),
        Some(processes) => processes,
    };
    for (number, process) in processes.iter().enumerate() {
        writeln!(
            out,
            "  {:<13}pid {:<8} {:<12} {:>10}  {:<3}  {}{}",
            if number == 0 { "Processes" } else { "" },
            process.pid,
            process.user_text(),
            or_na(process.used_memory_bytes, mib_text),
            process.kind.short(),
            process.command_text(),
            if process.belongs_to_job(job_pid) {
                "  (the session's job)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}
