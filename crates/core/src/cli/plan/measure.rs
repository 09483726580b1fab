//! `gputune plan --measure -- COMMAND…`: the arguments and the text; the measuring itself is
//! `measure_job`'s (one engine for the CLI and the Plan tab). The job's output goes to stderr,
//! stdout holds the report; Ctrl-C stops the job (a second one cuts its grace) and exits 130.

use std::ffi::OsString;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{PlanArgs, load_model, training_setup};
use crate::device::BackendOptions;
use crate::device::worker::DeviceWorker;
use crate::job::as_user::{InvokingUser, invoking_user, runs_as_sentence};
use crate::job::feed::Echo;
use crate::measure_job::{JobSpec, Watcher, compare_with_plan, measure_job, mib};
use gputune_formats::reports::measure::{MeasureReport, RunResult};

/// The terminal's side of a measurement: gputune's lines and the job's output on stderr.
struct Terminal<'a> {
    run_as: Option<&'a InvokingUser>,
    /// Whether the job's output left a line open (a tqdm bar drawn with `\r`).
    line_open: Arc<AtomicBool>,
}

impl Terminal<'_> {
    /// Ends the job's open line so gputune's own line starts on a line of its own.
    fn end_open_line(&self) {
        if self.line_open.swap(false, Ordering::SeqCst) {
            eprintln!();
        }
    }
}

impl Watcher for Terminal<'_> {
    fn message(&mut self, text: &str) {
        self.end_open_line();
        eprintln!("gputune: {text}");
    }

    fn job_output(&mut self) -> Box<dyn Write + Send> {
        Box::new(Echo::new(
            Box::new(std::io::stderr()),
            Arc::clone(&self.line_open),
        ))
    }

    fn run_starting(&mut self, command: &[OsString], _micro_batch: Option<u64>) {
        let shown: Vec<String> = command
            .iter()
            .map(|argument| crate::text::printable(&argument.to_string_lossy()))
            .collect();
        self.message(&format!("measuring: {}", shown.join(" ")));
    }

    fn run_as(&self) -> Option<InvokingUser> {
        self.run_as.cloned()
    }
}

/// Runs `gputune plan --measure`; returns the exit status.
pub fn run(args: &PlanArgs, backend: &BackendOptions, out: &mut dyn Write) -> anyhow::Result<i32> {
    if args.command.is_empty() {
        anyhow::bail!(
            "--measure needs the training command after --: gputune plan --measure -- python train.py --batch-size {{mb}}"
        );
    }
    let spec = JobSpec::new(
        args.command.clone(),
        &args.micro_batches,
        args.steps,
        args.seconds,
        args.confirm,
    )
    .and_then(|spec| spec.with_progress_regex(args.progress_regex.clone()))
    .map_err(|message| anyhow::anyhow!(cli_words(&message)))?;
    // The plan's side is checked before any run, so a typo costs no job start.
    let model = match &args.model {
        Some(name) => Some(load_model(name)?),
        None => None,
    };
    let setup = match &model {
        Some(model) => Some(training_setup(args, model)?),
        None => None,
    };
    let run_as_user = invoking_user(args.keep_root).map_err(anyhow::Error::msg)?;
    let opened = crate::device::open_backend(backend)?;
    if let Some(reason) = &opened.fallback_reason {
        anyhow::bail!(
            "There is no NVIDIA driver to watch the job with ({reason}): --measure needs the GPU the job runs on."
        );
    }
    let mut worker = DeviceWorker::start(opened.backend, "gputune-measure");
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let mut terminal = Terminal {
        run_as: run_as_user.as_ref(),
        line_open: Arc::new(AtomicBool::new(false)),
    };
    if let Some(user) = &run_as_user {
        terminal.message(&runs_as_sentence(user));
    }
    let job = measure_job(&mut worker, &spec, &stop, &mut terminal)?;
    terminal.end_open_line();
    let plan = match (&model, &setup) {
        (Some(model), Some(setup)) => {
            Some(compare_with_plan(model, setup, &job.runs, job.fit.as_ref()))
        }
        _ => None,
    };
    let interrupted = job.interrupted;
    let nothing_fits = job.nothing_fits();
    let measured_something = job.measured_something();
    let report = MeasureReport { job, plan };
    if args.json {
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write_text(out, &report)?;
    }
    if interrupted {
        return Ok(130);
    }
    Ok(if nothing_fits {
        super::EXIT_DOES_NOT_FIT
    } else if measured_something {
        super::EXIT_FITS
    } else {
        1
    })
}

/// The engine's words for an input, as the CLI's option names.
fn cli_words(message: &str) -> String {
    message
        .replace("The micro-batches must", "--micro-batches must")
        .replace("Micro-batches need", "--micro-batches needs")
        .replace("The steps per run must", "--steps must")
        .replace("The seconds per run must", "--seconds must")
}

fn write_text(out: &mut dyn Write, report: &MeasureReport) -> std::io::Result<()> {
    if let (Some(card), Some(bytes)) = (&report.job.card, report.job.gpu_memory_bytes) {
        writeln!(
            out,
            "Card: {} ({})",
            crate::text::printable(card),
            mib(bytes as f64)
        )?;
    }
    for run in &report.job.runs {
        let size = run
            .micro_batch
            .map_or_else(|| "job".to_string(), |size| format!("micro-batch {size}"));
        let result = match &run.result {
            RunResult::Measured => match run.peak_bytes {
                Some(peak) => format!("peak {}", mib(peak as f64)),
                None => "no memory seen".to_string(),
            },
            RunResult::OutOfMemory { because } => format!("out of memory ({because})"),
            RunResult::Failed { because } => format!("not measured: {because}"),
        };
        writeln!(
            out,
            "  {size:<16} {result}, {} steps read in {:.1} s",
            run.steps_read, run.seconds
        )?;
    }
    if let Some(fit) = &report.job.fit {
        writeln!(
            out,
            "Fit: {} fixed + {} per sample.",
            mib(fit.fixed_bytes as f64),
            mib(fit.per_sample_bytes as f64)
        )?;
    }
    if let Some(plan) = &report.plan {
        writeln!(
            out,
            "Against the plan for {}:",
            crate::text::printable(&plan.model)
        )?;
        for run in &plan.runs {
            writeln!(
                out,
                "  micro-batch {:<5} measured {}, planned {} ({:+.1} %)",
                run.micro_batch,
                mib(run.measured_bytes as f64),
                mib(run.planned_bytes as f64),
                run.difference_pct
            )?;
        }
        for line in &plan.differences {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(out, "{}", report.job.summary)
}
