//! A stand-in training job for `gputune plan --measure`'s tests: it holds GPU memory as a
//! function of its micro-batch (fixed + per-sample MiB, registered as its own process with the
//! fake libnvidia-ml's state, `FAKE_NVML_STATE`), prints a tqdm bar, and "runs out of memory"
//! past the card's memory as PyTorch does (the CUDA out-of-memory error on stderr, status 1).
//!
//! ```text
//! fake_training_memory --micro-batch N [--fixed-mib 2048] [--mib-per-sample 1536]
//!                      [--rate 50] [--seconds 60] [--gpu 0] [--silent-oom] [--in-child]
//!                      [--ignore-sigterm] [--own-progress]
//! ```
//!
//! It holds the fixed part from the start and the whole at its first step (a real job's peak
//! comes with its first backward pass). `--silent-oom`: past the card it holds all of the
//! card and goes on without a word (a job that swaps into unified memory). `--in-child`: the
//! work runs in a child process (as under a launcher), so only the child is on the GPU.
//! `--ignore-sigterm`: the job (and its child) go on after SIGTERM, as a hung job does.
//! `--own-progress`: "batch N done" instead of the bar, a line no known format reads.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvidia_ml_fake::FakeProcess;

use gputune_formats::card::ProcessKind;

const MIB: u64 = 1024 * 1024;

struct Options {
    micro_batch: u64,
    fixed_mib: u64,
    mib_per_sample: u64,
    rate: f64,
    seconds: f64,
    gpu: u32,
    silent_oom: bool,
    in_child: bool,
    ignore_sigterm: bool,
    own_progress: bool,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        micro_batch: 0,
        fixed_mib: 2048,
        mib_per_sample: 1536,
        rate: 50.0,
        seconds: 60.0,
        gpu: 0,
        silent_oom: false,
        in_child: false,
        ignore_sigterm: false,
        own_progress: false,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(name) = arguments.next() {
        match name.as_str() {
            "--silent-oom" => {
                options.silent_oom = true;
                continue;
            }
            "--in-child" => {
                options.in_child = true;
                continue;
            }
            "--ignore-sigterm" => {
                options.ignore_sigterm = true;
                continue;
            }
            "--own-progress" => {
                options.own_progress = true;
                continue;
            }
            _ => {}
        }
        let value = arguments
            .next()
            .ok_or_else(|| format!("{name} needs a value"))?;
        let number = || {
            value
                .parse::<f64>()
                .map_err(|_| format!("{name}: {value:?} is not a number"))
        };
        match name.as_str() {
            "--micro-batch" => options.micro_batch = number()? as u64,
            "--fixed-mib" => options.fixed_mib = number()? as u64,
            "--mib-per-sample" => options.mib_per_sample = number()? as u64,
            "--rate" => options.rate = number()?,
            "--seconds" => options.seconds = number()?,
            "--gpu" => options.gpu = number()? as u32,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.micro_batch == 0 {
        return Err("--micro-batch N (1 or more) is needed".to_string());
    }
    Ok(options)
}

fn fail(error: &str) -> ! {
    eprintln!("fake_training_memory: {error}");
    std::process::exit(2);
}

fn main() {
    let options = parse().unwrap_or_else(|error| fail(&error));
    if options.ignore_sigterm {
        // SAFETY: at the start of main, before any other thread: ignoring a signal.
        let ignored = unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGTERM,
                nix::sys::signal::SigHandler::SigIgn,
            )
        };
        if let Err(error) = ignored {
            fail(&error.to_string());
        }
    }
    if options.in_child {
        let arguments: Vec<String> = std::env::args()
            .skip(1)
            .filter(|argument| argument != "--in-child")
            .collect();
        let program = std::env::current_exe().unwrap_or_else(|error| fail(&error.to_string()));
        let status = std::process::Command::new(program)
            .args(arguments)
            .status()
            .unwrap_or_else(|error| fail(&error.to_string()));
        std::process::exit(status.code().unwrap_or(1));
    }
    let state = std::env::var_os(nvidia_ml_fake::STATE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| fail("FAKE_NVML_STATE names no state file"));
    let card_bytes = nvidia_ml_fake::load_state(&state)
        .ok()
        .and_then(|fake| {
            fake.machine
                .gpus
                .get(options.gpu as usize)
                .map(|gpu| gpu.spec.memory_total_bytes)
        })
        .unwrap_or_else(|| fail("the fake machine has no such GPU"));
    let hold = |bytes: u64| {
        let process = FakeProcess {
            gpu_index: options.gpu,
            pid: std::process::id(),
            kind: ProcessKind::Compute,
            used_memory_bytes: Some(bytes),
        };
        if let Err(error) = nvidia_ml_fake::register_process(&state, process) {
            fail(&error);
        }
    };
    let fixed_bytes = options.fixed_mib * MIB;
    let whole_bytes = fixed_bytes + options.micro_batch * options.mib_per_sample * MIB;
    // The model and optimizer first.
    hold(fixed_bytes.min(card_bytes));
    let mut stderr = std::io::stderr();
    if whole_bytes > card_bytes {
        if options.silent_oom {
            hold(card_bytes);
        } else {
            let _ = nvidia_ml_fake::remove_process(&state, std::process::id());
            let _ = writeln!(
                stderr,
                "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} MiB. GPU {} has a total capacity of {:.2} GiB",
                options.mib_per_sample,
                options.gpu,
                card_bytes as f64 / (1024.0 * MIB as f64)
            );
            std::process::exit(1);
        }
    } else {
        hold(whole_bytes);
    }
    let started = Instant::now();
    let step_s = 1.0 / options.rate.max(0.1);
    let mut steps = 0u64;
    while started.elapsed().as_secs_f64() < options.seconds {
        std::thread::sleep(Duration::from_secs_f64(step_s));
        steps += 1;
        let elapsed = started.elapsed().as_secs();
        let _ = if options.own_progress {
            write!(stderr, "\rbatch {steps} done")
        } else {
            write!(
                stderr,
                "\r{steps}it [{:02}:{:02}, {:.2}it/s]",
                elapsed / 60,
                elapsed % 60,
                options.rate
            )
        };
        let _ = stderr.flush();
    }
    let _ = nvidia_ml_fake::remove_process(&state, std::process::id());
    let _ = writeln!(stderr, "\nfake_training_memory: {steps} steps done.");
}
