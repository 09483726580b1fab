//! The families over a simulated eight-GPU box: dcgm-exporter's names and labels, gputune's
//! own, and what is left out when a reading failed or is stale.

use super::{Context, render};
use crate::device::sim::{SimOptions, SimScenario};
use crate::device::{BackendChoice, BackendOptions};
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::{BackendKind, DeviceError, FanMode};
use gputune_formats::protocol::Snapshot;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::tuning::{GpuInfo, GpuTuning, Holder, SessionPurpose};

fn eight_gpus() -> Snapshot {
    let options = BackendOptions {
        choice: BackendChoice::Sim,
        nvml_library_path: None,
        sim: SimOptions {
            scenario: SimScenario::EightRtx4090,
            ..SimOptions::default()
        },
    };
    let mut backend = crate::device::open_backend(&options)
        .unwrap_or_else(|error| panic!("{error}"))
        .backend;
    let mut snapshot = Snapshot {
        gpus: Vec::new(),
        tunings: Vec::new(),
        latest: Vec::new(),
    };
    for index in 0..8 {
        let identity = backend.identity(index).unwrap_or_else(|e| panic!("{e}"));
        let constraints = backend.constraints(index).unwrap_or_else(|e| panic!("{e}"));
        let current = backend
            .current_settings(index)
            .unwrap_or_else(|e| panic!("{e}"));
        snapshot.tunings.push(GpuTuning {
            gpu_index: index,
            gpu_uuid: identity.uuid.clone(),
            in_force: SettingsInForce::from_card(&current, Default::default()),
            fan_curve: None,
            fan_safety_engaged: false,
            holders: Vec::new(),
            last_change: None,
            last_critical: None,
            temperature_hold: None,
        });
        snapshot.gpus.push(GpuInfo {
            identity,
            constraints,
        });
        snapshot.latest.push(Some(backend.telemetry(index)));
    }
    snapshot
}

fn context() -> Context {
    Context {
        hostname: "box \"7\"".to_string(),
        version: "0.1.0".to_string(),
        backend: BackendKind::Sim,
        daemon: false,
    }
}

/// The sample lines of `name` (without HELP/TYPE).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

#[test]
fn dcgm_exporter_names_labels_and_units() {
    let snapshot = eight_gpus();
    let text = render(&snapshot, &context(), true);
    let power = samples(&text, "DCGM_FI_DEV_POWER_USAGE");
    assert_eq!(power.len(), 8);
    let gpu3 = &snapshot.gpus[3].identity;
    let expected_labels = format!(
        "DCGM_FI_DEV_POWER_USAGE{{gpu=\"3\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia3\",modelName=\"{}\",Hostname=\"box \\\"7\\\"\"",
        gpu3.uuid, gpu3.pci_bus_id, gpu3.name
    );
    assert!(power[3].starts_with(&expected_labels), "{}", power[3]);
    let Some(Ok(reading)) = &snapshot.latest[3] else {
        panic!("GPU 3 reads");
    };
    let watts = f64::from(reading.power_draw_mw.unwrap_or_default()) / 1000.0;
    assert!(power[3].ends_with(&format!("}} {watts}")), "{}", power[3]);
    assert!(text.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
    assert!(text.contains("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"));
    let used_mib = reading.memory_used_bytes.unwrap_or_default() / (1024 * 1024);
    assert!(samples(&text, "DCGM_FI_DEV_FB_USED")[3].ends_with(&format!(" {used_mib}")));
    for family in [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gputune_power_limit_watts",
        "gputune_power_limit_enforced_watts",
        "gputune_power_limit_default_watts",
        "gputune_fan_curve_active",
        "gputune_session_active",
    ] {
        assert_eq!(samples(&text, family).len(), 8, "{family}");
        assert_eq!(text.matches(&format!("# TYPE {family} ")).count(), 1);
    }
    // Two fans per card; nine throttle reasons per card.
    assert_eq!(samples(&text, "gputune_fan_speed_percent").len(), 16);
    assert_eq!(samples(&text, "gputune_throttle_reason").len(), 72);
    assert!(samples(&text, "gputune_exporter_info")[0].contains("backend=\"sim\""));
    // gputune's own families: Prometheus's snake_case labels.
    let own = format!(
        "gputune_power_limit_default_watts{{gpu=\"3\",gpu_uuid=\"{}\",pci_bus_id=\"{}\",device=\"nvidia3\",model_name=\"{}\",{BASE_END}}} 450",
        gpu3.uuid, gpu3.pci_bus_id, gpu3.name
    );
    assert_eq!(samples(&text, "gputune_power_limit_default_watts")[3], own);
}

/// Where gputune's own labels of a simulated GPU end.
const BASE_END: &str = "hostname=\"box \\\"7\\\"\",driver_version=\"simulated\"";

#[test]
fn what_the_engine_holds_is_exported() {
    let mut snapshot = eight_gpus();
    let tuning = &mut snapshot.tunings[1];
    tuning.in_force.power_limit_mw = Some(312_500);
    tuning.in_force.gpu_clock_lock = ClockLockInForce::Locked {
        min_mhz: 210,
        max_mhz: 2520,
    };
    tuning.in_force.memory_clock_lock = ClockLockInForce::Unlocked;
    tuning.in_force.gpu_clock_offset_mhz = Some(-150);
    tuning.in_force.fans = Some(vec![FanMode::Manual { speed_pct: 60 }, FanMode::Automatic]);
    tuning.holders = vec![Holder {
        session: 4,
        controls: vec![gputune_formats::tuning::Hold::PowerLimit],
        purpose: SessionPurpose::Trial,
        by: "gputune apply --try 60 (pid 42, user \"al\\ice\")".to_string(),
        client: 3,
        since_ms: 1_700_000_000_000,
        trial_ends_at_ms: Some(1_700_000_060_500),
        job_pid: None,
        energy_at_start_mj: None,
        job: None,
    }];
    // The session began 1,234.5 J ago by the card's own counter.
    let energy_now_mj = snapshot.latest[1]
        .as_ref()
        .and_then(|reading| reading.as_ref().ok())
        .and_then(|reading| reading.energy_total_mj)
        .expect("the simulated card counts energy");
    if let Some(holder) = snapshot.tunings[1].holders.first_mut() {
        holder.energy_at_start_mj = Some(energy_now_mj - 1_234_500);
    }
    let text = render(&snapshot, &context(), true);
    let one = |family: &str| -> Vec<String> {
        samples(&text, family)
            .into_iter()
            .filter(|line| line.contains("gpu=\"1\""))
            .map(|line| line.split_once(BASE_END).map_or(line, |x| x.1).to_string())
            .collect()
    };
    assert_eq!(one("gputune_power_limit_watts"), ["} 312.5".to_string()]);
    let energy = one("gputune_session_energy_joules");
    assert_eq!(energy.len(), 1, "{energy:?}");
    assert!(energy[0].ends_with(" 1234.5"), "{energy:?}");
    assert_eq!(one("gputune_clock_locked").len(), 2);
    assert!(one("gputune_clock_lock_min_mhz")[0].ends_with(",clock=\"graphics\"} 210"));
    assert!(one("gputune_clock_lock_max_mhz")[0].ends_with(" 2520"));
    assert!(one("gputune_clock_offset_mhz")[0].ends_with(",clock=\"graphics\"} -150"));
    assert_eq!(one("gputune_fan_manual_percent").len(), 1);
    assert!(one("gputune_fan_manual_percent")[0].ends_with(",fan=\"0\"} 60"));
    assert!(one("gputune_session_active")[0].ends_with(" 1"));
    assert!(
        one("gputune_session_info")[0].ends_with(
            ",purpose=\"trial\",holder=\"gputune apply --try 60 (pid 42, user \\\"al\\\\ice\\\")\",controls=\"power_limit\"} 1"
        ),
        "{:?}",
        one("gputune_session_info")
    );
    assert!(one("gputune_trial_end_timestamp_seconds")[0].ends_with(" 1700000060.5"));
    // Only GPU 1 is held.
    assert_eq!(samples(&text, "gputune_session_info").len(), 1);
}

#[test]
fn failed_and_stale_readings_are_left_out_and_said() {
    let mut snapshot = eight_gpus();
    snapshot.latest[2] = Some(Err(DeviceError::GpuLost { index: 2 }));
    snapshot.latest[5] = None;
    let text = render(&snapshot, &context(), true);
    assert_eq!(samples(&text, "DCGM_FI_DEV_GPU_TEMP").len(), 6);
    let ok = samples(&text, "gputune_reading_ok");
    assert_eq!(ok.len(), 8);
    assert!(ok[2].ends_with(" 0") && ok[5].ends_with(" 0") && ok[0].ends_with(" 1"));
    // The power limits the engine knows stay.
    assert_eq!(samples(&text, "gputune_power_limit_watts").len(), 8);
    let stale = render(&snapshot, &context(), false);
    assert!(samples(&stale, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    assert!(!stale.contains("# TYPE DCGM_FI_DEV_GPU_TEMP"));
    assert_eq!(samples(&stale, "gputune_power_limit_max_watts").len(), 8);
}

/// A scheduler's job session holding `gpu`'s power limit since `since_ms`, begun
/// `energy_used_mj` ago by the card's counter.
fn job_holder(snapshot: &Snapshot, gpu: usize, job_id: &str, user: &str, since_ms: u64) -> Holder {
    let energy_now_mj = snapshot.latest[gpu]
        .as_ref()
        .and_then(|reading| reading.as_ref().ok())
        .and_then(|reading| reading.energy_total_mj)
        .expect("the simulated card counts energy");
    Holder {
        session: 9,
        controls: vec![gputune_formats::tuning::Hold::PowerLimit],
        purpose: SessionPurpose::Job,
        by: format!("slurm job {job_id} (user {user})"),
        client: 5,
        since_ms,
        trial_ends_at_ms: None,
        job_pid: None,
        energy_at_start_mj: Some(energy_now_mj - 3_600_000),
        job: Some(gputune_formats::tuning::JobInfo {
            scheduler: "slurm".to_string(),
            job_id: job_id.to_string(),
            step: "batch".to_string(),
            user: user.to_string(),
            uid: 1001,
        }),
    }
}

#[test]
fn a_jobs_gpus_carry_its_id_and_user_on_every_series_and_its_energy() {
    let mut snapshot = eight_gpus();
    let holder = job_holder(&snapshot, 2, "4242_7", "al\"ice", 1_700_000_000_000);
    snapshot.tunings[2].holders = vec![holder];
    let text = render(&snapshot, &context(), true);
    let job_labels = "hpc_job=\"4242_7\",hpc_user=\"al\\\"ice\"";
    let mut families = 0;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let of_gpu2 = line.contains("{gpu=\"2\",");
        assert_eq!(line.contains(job_labels), of_gpu2, "{line}");
        assert_eq!(line.contains("hpc_job="), of_gpu2, "{line}");
        families += usize::from(of_gpu2);
    }
    // Every family that has a series for GPU 2 carries the job (a reading, a limit, a session).
    assert!(families > 40, "{families}");
    let power = samples(&text, "DCGM_FI_DEV_POWER_USAGE");
    assert!(power[2].contains(&format!(
        "DCGM_FI_DRIVER_VERSION=\"simulated\",{job_labels}}}"
    )));
    let energy = samples(&text, "gputune_job_energy_joules");
    assert_eq!(energy.len(), 1, "{energy:?}");
    assert!(
        energy[0].ends_with(&format!(",{job_labels}}} 3600")),
        "{energy:?}"
    );

    // The job ended: no GPU carries a job, and no job's energy is left.
    snapshot.tunings[2].holders.clear();
    let after = render(&snapshot, &context(), true);
    assert!(!after.contains("hpc_job="));
    assert!(!after.contains("hpc_user="));
    assert!(samples(&after, "gputune_job_energy_joules").is_empty());
    assert_eq!(samples(&after, "DCGM_FI_DEV_POWER_USAGE").len(), 8);
}

#[test]
fn each_job_on_a_gpu_gets_its_own_series_and_a_jobs_steps_one() {
    let mut snapshot = eight_gpus();
    let first = job_holder(&snapshot, 4, "100", "alice", 1_700_000_000_000);
    // A later step of job 100 joined its session; job 101 holds the card's fans.
    let mut step = first.clone();
    step.since_ms += 60_000;
    step.energy_at_start_mj = step.energy_at_start_mj.map(|mj| mj + 1_000_000);
    let mut other = job_holder(&snapshot, 4, "101", "bob", 1_700_000_100_000);
    other.controls = vec![gputune_formats::tuning::Hold::Fans];
    other.energy_at_start_mj = other.energy_at_start_mj.map(|mj| mj + 3_000_000);
    snapshot.tunings[4].holders = vec![first, step, other];
    let text = render(&snapshot, &context(), true);
    let temperature: Vec<&str> = samples(&text, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .filter(|line| line.contains("{gpu=\"4\","))
        .collect();
    assert_eq!(temperature.len(), 2, "{temperature:?}");
    assert!(temperature[0].contains("hpc_job=\"100\",hpc_user=\"alice\""));
    assert!(temperature[1].contains("hpc_job=\"101\",hpc_user=\"bob\""));
    let energy = samples(&text, "gputune_job_energy_joules");
    assert_eq!(energy.len(), 2, "{energy:?}");
    // Each job's energy from its first session's start.
    assert!(energy[0].contains("hpc_job=\"100\"") && energy[0].ends_with(" 3600"));
    assert!(energy[1].contains("hpc_job=\"101\"") && energy[1].ends_with(" 600"));
}
