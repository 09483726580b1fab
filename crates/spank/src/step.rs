//! A step's session: held at its start (the job, its cards by device number, the plan, the
//! daemon's answer), ended after its last task with the job's record written into Slurm's.

use std::ffi::{CStr, CString, c_char, c_int};
use std::time::Duration;

use gputune_formats::jobs::JobRecord;
use gputune_formats::tuning::JobInfo;

use crate::daemon::DaemonLink;
use crate::ffi::{self, SpankHandle};
use crate::policy::Policy;
use crate::{HeldStep, allocation, ask, comment, gpus, plan, say_error, say_info, with_state};

/// Holds the step's cards: its job, its cards by device number, the plan, the session.
pub(crate) fn start_step(
    spank: SpankHandle,
    policy: &Policy,
    wanted: &ask::Wanted,
) -> Result<(), String> {
    let job = job_info(spank)?;
    // The step's environment is the user's: it may only name cards Slurm gave the job, as
    // the job's prolog recorded them.
    let named = match getenv(spank, c"SLURM_STEP_GPUS").or_else(|| getenv(spank, c"SLURM_JOB_GPUS"))
    {
        Some(list) => gpus::parse_slurm_gpus(&list)?,
        None => Vec::new(),
    };
    let allocated = allocation::recorded(&policy.records_dir, &job.job_id)?;
    let whole_allocation = matches!(job.step.as_str(), "batch" | "extern" | "interactive");
    let minors =
        allocation::step_cards(&job.job_id, whole_allocation, &named, allocated.as_deref())?;
    if minors.is_empty() {
        return Ok(());
    }
    let label = format!(
        "gputune_spank.so (Slurm job {} step {})",
        job.job_id, job.step
    );
    let (mut link, welcome) = DaemonLink::connect(
        &policy.socket,
        &label,
        Duration::from_secs(policy.timeout_s),
    )?;
    let cards = gpus::cards_of(&minors, &welcome.gpus)?;
    let job_id = job.job_id.clone();
    let plan = plan::plan(policy, wanted, job, &cards)?;
    let started = link.start(plan.request)?;
    let mut lines = plan.lines;
    if started.joined {
        lines = vec![format!(
            "the job's settings, held since its first step on this node ({})",
            wanted.origin
        )];
    } else {
        lines.insert(0, format!("from {}", wanted.origin));
    }
    let summary = format!("gputune: {}", lines.join("; "));
    say_info(&summary);
    setenv(spank, c"GPUTUNE_SETTINGS", &summary);
    with_state(|state| {
        state.held = Some(HeldStep {
            link,
            session: started.session,
            job_id,
        });
    });
    Ok(())
}

pub(crate) fn job_id(spank: SpankHandle) -> Result<String, String> {
    let mut job_id: u32 = 0;
    // SAFETY: S_JOB_ID's out type is uint32_t.
    let read = unsafe { ffi::spank_get_item(spank, ffi::S_JOB_ID, &mut job_id as *mut u32) };
    if read != ffi::SUCCESS || job_id == 0 {
        return Err("gputune: Slurm did not say which job this is.".to_string());
    }
    Ok(job_id.to_string())
}

/// Ends the step's session (once), then writes the job's record into Slurm's.
pub(crate) fn end_step() {
    let (held, policy) = with_state(|state| (state.held.take(), state.policy.clone()));
    let Some(mut held) = held else {
        return;
    };
    let record = match held.link.end(held.session) {
        Ok(report) => {
            say_info(&format!("gputune: job {}: {}", held.job_id, report.message));
            report.job_record.map(|record| *record)
        }
        // The daemon ended the session itself (an Xid, a GPU lost): its record is the daemon's.
        Err(error) if error.contains(&format!("There is no session {}", held.session)) => {
            say_info(&format!("gputune: job {}: {error}", held.job_id));
            held.link
                .job_record(&held.job_id)
                .ok()
                .filter(|record| record.session == held.session)
        }
        // The connection closes as this returns, and the daemon puts the cards back then.
        Err(error) => {
            say_error(&error);
            None
        }
    };
    let Some(record) = record else {
        return;
    };
    let line = record_line(&record);
    say_info(&format!("job {}: {line}", held.job_id));
    if let Some(policy) = policy
        && policy.admin_comment
        && let Err(error) = comment::set_admin_comment(&policy.scontrol, &held.job_id, &line)
    {
        say_info(&format!("gputune: job {}: {error}", held.job_id));
    }
}

/// The line for the job's Slurm record, from the daemon's record of it: "gputune: 2 GPUs on
/// node1, 0.412 kWh, €0.14, 0.16 kg CO₂ (peak 448 W, 71 °C)".
fn record_line(record: &JobRecord) -> String {
    let peak_w = record
        .gpus
        .iter()
        .filter_map(|gpu| gpu.peak_power_w)
        .fold(None, |peak: Option<f64>, watts| {
            Some(peak.map_or(watts, |p| p.max(watts)))
        });
    let peak_c = record
        .gpus
        .iter()
        .filter_map(|gpu| gpu.peak_temperature_c)
        .max();
    let mut peaks = Vec::new();
    if let Some(watts) = peak_w {
        peaks.push(format!("{watts:.0} W"));
    }
    if let Some(celsius) = peak_c {
        peaks.push(format!("{celsius} °C"));
    }
    let estimated = if record.energy_estimated {
        " (estimated)"
    } else {
        ""
    };
    format!(
        "gputune: {} GPU{} on {}, {}{estimated}{}",
        record.gpus.len(),
        if record.gpus.len() == 1 { "" } else { "s" },
        record.node,
        gputune_core::job_energy::cost::cost_line(record.energy_j, record.cost.as_ref()),
        if peaks.is_empty() {
            String::new()
        } else {
            format!(" (peak {})", peaks.join(", "))
        }
    )
}

fn job_info(spank: SpankHandle) -> Result<JobInfo, String> {
    let mut job_id: u32 = 0;
    let mut step_id: u32 = 0;
    let mut uid: u32 = u32::MAX;
    // SAFETY: each item's documented out type (uint32_t, uint32_t, uid_t).
    let read = unsafe {
        [
            ffi::spank_get_item(spank, ffi::S_JOB_ID, &mut job_id as *mut u32),
            ffi::spank_get_item(spank, ffi::S_JOB_STEPID, &mut step_id as *mut u32),
            ffi::spank_get_item(spank, ffi::S_JOB_UID, &mut uid as *mut u32),
        ]
    };
    if read.iter().any(|&code| code != ffi::SUCCESS) || job_id == 0 {
        return Err("gputune: Slurm did not say which job this step belongs to.".to_string());
    }
    let step = match step_id {
        ffi::SLURM_BATCH_SCRIPT => "batch".to_string(),
        ffi::SLURM_EXTERN_CONT => "extern".to_string(),
        ffi::SLURM_INTERACTIVE_STEP => "interactive".to_string(),
        ffi::SLURM_PENDING_STEP => "pending".to_string(),
        number => number.to_string(),
    };
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |user| user.name);
    Ok(JobInfo {
        scheduler: "slurm".to_string(),
        job_id: job_id.to_string(),
        step,
        user,
        uid,
    })
}

/// A variable of the job's environment.
fn getenv(spank: SpankHandle, name: &CStr) -> Option<String> {
    let mut buffer = vec![0u8; 8192];
    // SAFETY: a valid handle, a NUL-terminated name and a buffer of the length given.
    let code = unsafe {
        ffi::spank_getenv(
            spank,
            name.as_ptr(),
            buffer.as_mut_ptr().cast::<c_char>(),
            buffer.len() as c_int,
        )
    };
    if code != ffi::SUCCESS {
        return None;
    }
    let end = buffer.iter().position(|&byte| byte == 0)?;
    Some(String::from_utf8_lossy(&buffer[..end]).into_owned())
}

/// Sets a variable in the job's environment (what the job is told).
fn setenv(spank: SpankHandle, name: &CStr, value: &str) {
    if let Ok(value) = CString::new(value.replace('\0', " ")) {
        // SAFETY: a valid handle and two NUL-terminated strings.
        unsafe { ffi::spank_setenv(spank, name.as_ptr(), value.as_ptr(), 1) };
    }
}
