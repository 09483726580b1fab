//! Reading a training job's progress from its output: tqdm bars (plain, Hugging Face's,
//! PyTorch Lightning's TQDM and Rich bars), Hugging Face Trainer's log dicts, or the user's own
//! `--progress-regex`. Bytes come in arbitrary chunks; a line ends at `\n` or `\r` (tqdm
//! redraws its bar with `\r`). Nothing here panics on odd input, and a line with no end never
//! grows the buffer past [`MAX_LINE_BYTES`].

use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};

use gputune_formats::reports::sweep_step::{ProgressSource, WorkUnit};

/// The longest line kept while waiting for its end; older bytes are dropped.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// A user's regex may compile to at most this much memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// tqdm's unit names, and the usual words, as units (another name kept printable, 20
/// characters at most).
pub fn work_unit(name: &str) -> WorkUnit {
    match name.trim().to_ascii_lowercase().as_str() {
        "" | "it" | "its" | "step" | "steps" | "batch" | "batches" => WorkUnit::Step,
        "sample" | "samples" | "ex" | "example" | "examples" | "img" | "images" | "seq"
        | "seqs" | "sequences" => WorkUnit::Sample,
        "tok" | "toks" | "token" | "tokens" | "tk" => WorkUnit::Token,
        "epoch" | "epochs" => WorkUnit::Epoch,
        other => WorkUnit::Other(crate::text::printable(other).chars().take(20).collect()),
    }
}

/// A rate the job printed, or a counter whose cadence gives one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProgressValue {
    Rate { units_per_s: f64 },
    Count { units_done: f64 },
}

/// One thing read from the job's output, stamped with the sweep's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReading {
    pub at_ms: u64,
    pub value: ProgressValue,
    pub unit: WorkUnit,
    pub source: ProgressSource,
}

/// A rate with its unit: `4.50it/s`, `1.23s/it`, `12.3 samples/s`, `1.2k tok/s`.
static TQDM_RATE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        (?:^|[\s,\[|])
        (?:
            (?P<rate>\d+(?:\.\d+)?)\s?(?P<rate_scale>[kMG])?\s?(?P<rate_unit>[A-Za-z_]{1,20})/s
          | (?P<per>\d+(?:\.\d+)?)\s?s/(?P<per_unit>[A-Za-z_]{1,20})
        )
        (?:$|[\s,\]])",
    )
    .ok()
});
/// A bar's counter: `45/100` between bars or spaces, or `45it [` without a total.
static TQDM_COUNT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?:\|\s*|\s|━\s?|^)(?P<done>\d+(?:\.\d+)?)(?P<scale>[kMG])?/\d+(?:\.\d+)?[kMG]?(?:\s|\[|$)|(?:^|\s)(?P<bare>\d+)(?P<bare_unit>[A-Za-z_]{1,20}) \[")
        .ok()
});
/// Lightning's bars start with "Epoch N:" (TQDM) or "Epoch N/M" (Rich).
static LIGHTNING: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\s*Epoch \d+(?::|/\d+)").ok());
/// Bars that measure something other than training speed.
static NOT_TRAINING: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:Validation|Sanity Checking|Testing|Predicting|Evaluating|Eval)\b").ok()
});
/// A key and number in a Python or JSON dict: `'epoch': 0.12`, `"step": 40`.
static DICT_ENTRY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"['"](?P<key>[A-Za-z_]+)['"]\s*:\s*(?P<value>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"#)
        .ok()
});
/// ANSI escape sequences (colours, cursor moves).
static ANSI: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07").ok());

/// Reads progress from a stream of output.
pub struct ProgressParser {
    custom: Option<Regex>,
    pending: Vec<u8>,
}

impl ProgressParser {
    /// A parser of the known formats, or only of `custom_regex` when given. The regex needs a
    /// named group `rate` (units per second), `seconds_per` (seconds per unit) or `count` (a
    /// counter); an optional group `unit` names the unit.
    pub fn new(custom_regex: Option<&str>) -> Result<ProgressParser, String> {
        let custom = match custom_regex {
            None => None,
            Some(pattern) => {
                let regex = RegexBuilder::new(pattern)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|error| format!("--progress-regex is not a valid regex: {error}"))?;
                let names: Vec<&str> = regex.capture_names().flatten().collect();
                if !names
                    .iter()
                    .any(|name| matches!(*name, "rate" | "seconds_per" | "count"))
                {
                    return Err(
                        "--progress-regex needs a named group saying what it reads: (?P<rate>...) for units per second, (?P<seconds_per>...) for seconds per unit, or (?P<count>...) for a counter; (?P<unit>...) may name the unit."
                            .to_string(),
                    );
                }
                Some(regex)
            }
        };
        Ok(ProgressParser {
            custom,
            pending: Vec::new(),
        })
    }

    /// Takes the next bytes of output, read at `at_ms`; returns what the finished lines show.
    pub fn feed(&mut self, bytes: &[u8], at_ms: u64) -> Vec<ProgressReading> {
        let mut readings = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest
            .iter()
            .position(|byte| *byte == b'\n' || *byte == b'\r')
        {
            let line = if self.pending.is_empty() {
                String::from_utf8_lossy(&rest[..end]).into_owned()
            } else {
                self.pending.extend_from_slice(&rest[..end]);
                let line = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                line
            };
            self.read_line(&line, at_ms, &mut readings);
            rest = &rest[end + 1..];
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_LINE_BYTES {
            let excess = self.pending.len() - MAX_LINE_BYTES;
            self.pending.drain(..excess);
        }
        readings
    }

    fn read_line(&self, line: &str, at_ms: u64, readings: &mut Vec<ProgressReading>) {
        if line.trim().is_empty() {
            return;
        }
        let cleaned;
        let line = if line.contains('\x1b') {
            cleaned = match ANSI.as_ref() {
                Some(ansi) => ansi.replace_all(line, "").into_owned(),
                None => line.to_string(),
            };
            cleaned.as_str()
        } else {
            line
        };
        let mut push = |value: ProgressValue, unit: WorkUnit, source: ProgressSource| {
            let number = match value {
                ProgressValue::Rate { units_per_s } => units_per_s,
                ProgressValue::Count { units_done } => units_done,
            };
            let usable = match value {
                ProgressValue::Rate { .. } => number.is_finite() && number > 0.0,
                ProgressValue::Count { .. } => number.is_finite() && number >= 0.0,
            };
            if usable {
                readings.push(ProgressReading {
                    at_ms,
                    value,
                    unit,
                    source,
                });
            }
        };
        if let Some(custom) = &self.custom {
            read_custom(custom, line, &mut push);
            return;
        }
        if line.contains('{') && line.contains(':') {
            read_dict(line, &mut push);
            return;
        }
        if NOT_TRAINING
            .as_ref()
            .is_some_and(|not_training| not_training.is_match(line))
        {
            return;
        }
        if !line.contains("/s") && !line.contains("s/") {
            return;
        }
        let source = if LIGHTNING
            .as_ref()
            .is_some_and(|lightning| lightning.is_match(line))
        {
            ProgressSource::Lightning
        } else {
            ProgressSource::Tqdm
        };
        let Some(rate) = TQDM_RATE.as_ref().and_then(|rate| rate.captures(line)) else {
            return;
        };
        let unit = if let (Some(value), Some(unit)) = (rate.name("rate"), rate.name("rate_unit")) {
            let unit = work_unit(unit.as_str());
            let scale = scale_of(rate.name("rate_scale").map(|scale| scale.as_str()));
            if let Ok(number) = value.as_str().parse::<f64>() {
                push(
                    ProgressValue::Rate {
                        units_per_s: number * scale,
                    },
                    unit.clone(),
                    source,
                );
            }
            unit
        } else if let (Some(value), Some(unit)) = (rate.name("per"), rate.name("per_unit")) {
            let unit = work_unit(unit.as_str());
            if let Ok(seconds) = value.as_str().parse::<f64>()
                && seconds > 0.0
            {
                push(
                    ProgressValue::Rate {
                        units_per_s: 1.0 / seconds,
                    },
                    unit.clone(),
                    source,
                );
            }
            unit
        } else {
            return;
        };
        // The last counter on the line: Lightning's Rich bar says "Epoch 3/9" first.
        if let Some(count) = TQDM_COUNT
            .as_ref()
            .and_then(|count| count.captures_iter(line).last())
        {
            let done = count
                .name("done")
                .map(|done| {
                    (
                        done.as_str(),
                        scale_of(count.name("scale").map(|s| s.as_str())),
                    )
                })
                .or_else(|| count.name("bare").map(|bare| (bare.as_str(), 1.0)));
            if let Some((done, scale)) = done
                && let Ok(done) = done.parse::<f64>()
            {
                push(
                    ProgressValue::Count {
                        units_done: done * scale,
                    },
                    unit,
                    source,
                );
            }
        }
    }
}

fn scale_of(suffix: Option<&str>) -> f64 {
    match suffix {
        Some("k") => 1e3,
        Some("M") => 1e6,
        Some("G") => 1e9,
        _ => 1.0,
    }
}

/// A Hugging Face Trainer log dict: training progress (`step`, else `epoch`) and the
/// end-of-training rates; evaluation dicts are not training speed.
fn read_dict(line: &str, push: &mut impl FnMut(ProgressValue, WorkUnit, ProgressSource)) {
    let Some(entries) = DICT_ENTRY.as_ref() else {
        return;
    };
    let mut step = None;
    let mut epoch = None;
    let mut is_eval = false;
    let mut rates = Vec::new();
    for entry in entries.captures_iter(line) {
        let (Some(key), Some(value)) = (entry.name("key"), entry.name("value")) else {
            continue;
        };
        let Ok(number) = value.as_str().parse::<f64>() else {
            continue;
        };
        match key.as_str() {
            "step" | "global_step" => step = Some(number),
            "epoch" => epoch = Some(number),
            "train_samples_per_second" => rates.push((WorkUnit::Sample, number)),
            "train_steps_per_second" => rates.push((WorkUnit::Step, number)),
            "train_tokens_per_second" => rates.push((WorkUnit::Token, number)),
            key if key.starts_with("eval_") => is_eval = true,
            _ => {}
        }
    }
    for (unit, units_per_s) in rates {
        push(
            ProgressValue::Rate { units_per_s },
            unit,
            ProgressSource::HuggingFace,
        );
    }
    if is_eval {
        return;
    }
    match (step, epoch) {
        (Some(step), _) => push(
            ProgressValue::Count { units_done: step },
            WorkUnit::Step,
            ProgressSource::HuggingFace,
        ),
        (None, Some(epoch)) => push(
            ProgressValue::Count { units_done: epoch },
            WorkUnit::Epoch,
            ProgressSource::HuggingFace,
        ),
        (None, None) => {}
    }
}

fn read_custom(
    regex: &Regex,
    line: &str,
    push: &mut impl FnMut(ProgressValue, WorkUnit, ProgressSource),
) {
    let Some(captures) = regex.captures(line) else {
        return;
    };
    let unit = captures
        .name("unit")
        .map_or(WorkUnit::Step, |unit| work_unit(unit.as_str()));
    let number = |name: &str| {
        captures
            .name(name)
            .and_then(|value| value.as_str().trim().parse::<f64>().ok())
    };
    if let Some(rate) = number("rate") {
        push(
            ProgressValue::Rate { units_per_s: rate },
            unit.clone(),
            ProgressSource::Custom,
        );
    }
    if let Some(seconds) = number("seconds_per")
        && seconds > 0.0
    {
        push(
            ProgressValue::Rate {
                units_per_s: 1.0 / seconds,
            },
            unit.clone(),
            ProgressSource::Custom,
        );
    }
    if let Some(count) = number("count") {
        push(
            ProgressValue::Count { units_done: count },
            unit,
            ProgressSource::Custom,
        );
    }
}

#[cfg(test)]
mod tests;
