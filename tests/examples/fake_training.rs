//! A stand-in training job for the sweep's tests and measurements: it "trains" on the fake
//! libnvidia-ml's card, each step taking as long as the card's current SM clock makes it (a
//! compute-bound job: speed ∝ clock), and prints its progress the way real jobs do.
//!
//! ```text
//! fake_training --nvml-lib PATH [--format tqdm|hf|lightning|custom|quiet] [--rate 20]
//!               [--seconds 60] [--fail-after-s S] [--log-every 10] [--steps-per-epoch 500]
//!               [--gpus 1]
//! ```
//!
//! `--rate` is the steps per second at the reference clock of 2520 MHz. `tqdm` redraws a bar
//! with `\r` on stderr (as tqdm does, every 0.1 s, with tqdm's smoothed rate); `hf` prints a
//! Hugging Face Trainer log dict on stdout every `--log-every` steps (no bar, as with
//! `disable_tqdm=True`); `lightning` redraws Lightning's bar ("Epoch 0: ..."); `quiet` prints
//! nothing (the sweep's proxy fallback). `--fail-after-s` ends the job with a CUDA-like error
//! and exit status 3. `--gpus N` trains data-parallel on GPUs 0..N: each step waits for the
//! slowest card, so the speed follows the lowest SM clock among them.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;

/// The clock at which the job runs at `--rate`.
const REFERENCE_CLOCK_MHZ: f64 = 2520.0;
/// How often the clock is read (NVML calls are not free, and the card moves slowly).
const CLOCK_EVERY: Duration = Duration::from_millis(100);
/// How often a bar is redrawn, as tqdm's `mininterval`.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

struct Options {
    nvml_lib: PathBuf,
    format: String,
    rate: f64,
    seconds: f64,
    fail_after_s: Option<f64>,
    log_every: u64,
    steps_per_epoch: u64,
    gpus: u32,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        nvml_lib: PathBuf::new(),
        format: "tqdm".to_string(),
        rate: 20.0,
        seconds: 60.0,
        fail_after_s: None,
        log_every: 10,
        steps_per_epoch: 500,
        gpus: 1,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(name) = arguments.next() {
        let value = arguments
            .next()
            .ok_or_else(|| format!("{name} needs a value"))?;
        let number = || {
            value
                .parse::<f64>()
                .map_err(|_| format!("{name}: {value:?} is not a number"))
        };
        match name.as_str() {
            "--nvml-lib" => options.nvml_lib = PathBuf::from(&value),
            "--format" => options.format = value.clone(),
            "--rate" => options.rate = number()?,
            "--seconds" => options.seconds = number()?,
            "--fail-after-s" => options.fail_after_s = Some(number()?),
            "--log-every" => options.log_every = number()?.max(1.0) as u64,
            "--steps-per-epoch" => options.steps_per_epoch = number()?.max(1.0) as u64,
            "--gpus" => options.gpus = number()?.max(1.0) as u32,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

fn main() {
    let options = match parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("fake_training: {error}");
            std::process::exit(2);
        }
    };
    let nvml = match Nvml::builder()
        .lib_path(options.nvml_lib.as_os_str())
        .init()
    {
        Ok(nvml) => nvml,
        Err(error) => {
            eprintln!("fake_training: NVML: {error}");
            std::process::exit(2);
        }
    };
    let mut devices = Vec::new();
    for index in 0..options.gpus {
        match nvml.device_by_index(index) {
            Ok(device) => devices.push(device),
            Err(error) => {
                eprintln!("fake_training: GPU {index}: {error}");
                std::process::exit(2);
            }
        }
    }
    let started = Instant::now();
    let mut clock_mhz = REFERENCE_CLOCK_MHZ;
    let mut clock_read_at: Option<Instant> = None;
    let mut redrawn_at = started;
    let mut ema_rate: Option<f64> = None;
    let mut last_step_at = started;
    let mut steps: u64 = 0;
    let mut stderr = std::io::stderr();
    let mut stdout = std::io::stdout();
    // Work done in "reference steps": each step needs one; the card does clock/2520 a second
    // per unit of --rate.
    let mut work = 0.0f64;
    let mut previous = started;
    while started.elapsed().as_secs_f64() < options.seconds {
        if let Some(fail_after_s) = options.fail_after_s
            && started.elapsed().as_secs_f64() >= fail_after_s
        {
            let _ = writeln!(
                stderr,
                "\nRuntimeError: CUDA error: an illegal memory access was encountered"
            );
            std::process::exit(3);
        }
        if clock_read_at.is_none_or(|at| at.elapsed() >= CLOCK_EVERY) {
            // Data-parallel: every step waits for the slowest card.
            if let Some(mhz) = devices
                .iter()
                .filter_map(|device| device.clock_info(Clock::SM).ok())
                .min()
            {
                clock_mhz = f64::from(mhz);
            }
            clock_read_at = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(2));
        let now = Instant::now();
        work += now.duration_since(previous).as_secs_f64() * options.rate * clock_mhz
            / REFERENCE_CLOCK_MHZ;
        previous = now;
        while work >= 1.0 {
            work -= 1.0;
            steps += 1;
            let step_s = now.duration_since(last_step_at).as_secs_f64().max(1e-6);
            last_step_at = now;
            // tqdm's exponential moving average, smoothing 0.3.
            ema_rate = Some(match ema_rate {
                Some(rate) => 0.3 * (1.0 / step_s) + 0.7 * rate,
                None => 1.0 / step_s,
            });
            if options.format == "hf" && steps.is_multiple_of(options.log_every) {
                let epoch = steps as f64 / options.steps_per_epoch as f64;
                let _ = writeln!(
                    stdout,
                    "{{'loss': {:.4}, 'grad_norm': 1.0312, 'learning_rate': 4.9e-05, 'epoch': {epoch:.4}}}",
                    2.0 / (1.0 + steps as f64 / 1000.0)
                );
                let _ = stdout.flush();
            }
        }
        if now.duration_since(redrawn_at) >= REDRAW_EVERY {
            redrawn_at = now;
            let rate = ema_rate.map_or_else(|| "?".to_string(), |rate| format!("{rate:.2}"));
            let elapsed = started.elapsed().as_secs();
            let line = match options.format.as_str() {
                "tqdm" => Some(format!(
                    "\r{steps}it [{:02}:{:02}, {rate}it/s]",
                    elapsed / 60,
                    elapsed % 60
                )),
                "lightning" => {
                    let in_epoch = steps % options.steps_per_epoch;
                    Some(format!(
                        "\rEpoch {}: {:3.0}%|          | {in_epoch}/{} [{:02}:{:02}<00:00, {rate}it/s, v_num=0, loss=1.23]",
                        steps / options.steps_per_epoch,
                        in_epoch as f64 / options.steps_per_epoch as f64 * 100.0,
                        options.steps_per_epoch,
                        elapsed / 60,
                        elapsed % 60
                    ))
                }
                // A line no known format reads: a user's --progress-regex must.
                "custom" => Some(format!("\rdone {steps} batches, speed {rate} b/s")),
                _ => None,
            };
            if let Some(line) = line {
                let _ = stderr.write_all(line.as_bytes());
                let _ = stderr.flush();
            }
        }
    }
    let _ = writeln!(stderr);
    let _ = writeln!(stdout, "fake_training: {steps} steps done.");
}
