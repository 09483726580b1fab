//! The Prometheus text exposition format (version 0.0.4), written by hand: one `# HELP` and one
//! `# TYPE` line per family, then every sample of that family together, label values escaped
//! (`\\`, `\"`, `\n`), integers exact and watts as plain decimals.

use std::fmt::Write;

/// The `Content-Type` of what [`Exposition`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// One sample's value: integers stay exact (an energy counter in millijoules passes 2^53 after
/// a few years of a busy card), measured values are decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Integer(u64),
    Signed(i64),
    Decimal(f64),
}

impl Value {
    /// Milliwatts as watts ("312.5").
    pub fn watts(milliwatts: u32) -> Value {
        Value::Decimal(f64::from(milliwatts) / 1000.0)
    }

    /// Millijoules as joules.
    pub fn joules(millijoules: u64) -> Value {
        Value::Decimal(millijoules as f64 / 1000.0)
    }

    /// Milliseconds since the epoch as seconds ("1716900000.25").
    pub fn seconds(milliseconds: u64) -> Value {
        Value::Decimal(milliseconds as f64 / 1000.0)
    }

    pub fn flag(on: bool) -> Value {
        Value::Integer(u64::from(on))
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Value {
        Value::Integer(u64::from(value))
    }
}

/// A text body being written, family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
    /// The family whose header is written, so a family without samples writes nothing.
    open_family: Option<&'static str>,
}

impl Exposition {
    pub fn with_capacity(bytes: usize) -> Exposition {
        Exposition {
            text: String::with_capacity(bytes),
            open_family: None,
        }
    }

    /// One sample of family `name`; `base_labels` is already escaped (see [`label_pairs`]),
    /// `extra` are written after it and escaped here. The family's header comes before its
    /// first sample; samples of one family must be written one after another.
    pub fn sample(
        &mut self,
        family: &Family,
        base_labels: &str,
        extra: &[(&str, &str)],
        value: Value,
    ) {
        if self.open_family != Some(family.name) {
            self.open_family = Some(family.name);
            let _ = writeln!(
                self.text,
                "# HELP {} {}",
                family.name,
                escape_help(family.help)
            );
            let _ = writeln!(self.text, "# TYPE {} {}", family.name, family.kind.as_str());
        }
        self.text.push_str(family.name);
        if !base_labels.is_empty() || !extra.is_empty() {
            self.text.push('{');
            self.text.push_str(base_labels);
            for (position, (name, value)) in extra.iter().enumerate() {
                if position > 0 || !base_labels.is_empty() {
                    self.text.push(',');
                }
                push_label(&mut self.text, name, value);
            }
            self.text.push('}');
        }
        self.text.push(' ');
        match value {
            Value::Integer(value) => {
                let _ = write!(self.text, "{value}");
            }
            Value::Signed(value) => {
                let _ = write!(self.text, "{value}");
            }
            Value::Decimal(value) if value.is_finite() => {
                let _ = write!(self.text, "{value}");
            }
            Value::Decimal(_) => self.text.push_str("NaN"),
        }
        self.text.push('\n');
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A metric family: its name, type and help text.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

/// `name="value",...`, escaped, for labels every sample of a GPU carries.
pub fn label_pairs(pairs: &[(&str, &str)]) -> String {
    let mut text = String::new();
    for (position, (name, value)) in pairs.iter().enumerate() {
        if position > 0 {
            text.push(',');
        }
        push_label(&mut text, name, value);
    }
    text
}

fn push_label(text: &mut String, name: &str, value: &str) {
    text.push_str(name);
    text.push_str("=\"");
    for character in value.chars() {
        match character {
            '\\' => text.push_str("\\\\"),
            '"' => text.push_str("\\\""),
            '\n' => text.push_str("\\n"),
            other => text.push(other),
        }
    }
    text.push('"');
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMP: Family = Family {
        name: "DCGM_FI_DEV_GPU_TEMP",
        kind: Kind::Gauge,
        help: "GPU temperature (in C).",
    };

    #[test]
    fn families_have_one_header_and_labels_are_escaped() {
        let mut body = Exposition::default();
        let gpu0 = label_pairs(&[("gpu", "0"), ("modelName", "A \"quoted\\\" name\nx")]);
        body.sample(&TEMP, &gpu0, &[], Value::from(61));
        body.sample(&TEMP, "gpu=\"1\"", &[("fan", "0")], Value::Decimal(62.5));
        let energy = Family {
            name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            kind: Kind::Counter,
            help: "Total energy consumption since boot (in mJ).",
        };
        body.sample(&energy, "", &[], Value::Integer(u64::MAX));
        assert_eq!(
            body.into_text(),
            "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n\
             # TYPE DCGM_FI_DEV_GPU_TEMP gauge\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",modelName=\"A \\\"quoted\\\\\\\" name\\nx\"} 61\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",fan=\"0\"} 62.5\n\
             # HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n\
             # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
             DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION 18446744073709551615\n"
        );
    }

    #[test]
    fn values_are_written_as_prometheus_reads_them() {
        let mut body = Exposition::default();
        body.sample(&TEMP, "", &[("a", "b")], Value::watts(312_500));
        body.sample(&TEMP, "", &[], Value::watts(450_000));
        body.sample(&TEMP, "", &[], Value::Signed(-150));
        body.sample(&TEMP, "", &[], Value::seconds(1_716_900_000_250));
        body.sample(&TEMP, "", &[], Value::Decimal(f64::INFINITY));
        let text = body.into_text();
        let values: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit(' ').next())
            .collect();
        assert_eq!(values, ["312.5", "450", "-150", "1716900000.25", "NaN"]);
    }
}
