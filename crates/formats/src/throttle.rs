//! Why a GPU runs below its top clock: NVML's "clocks event reasons" bitmask, with names for
//! JSON and plain words for people.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One reason the GPU is holding its clocks down. Bit values are NVML's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThrottleReason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
}

impl ThrottleReason {
    /// Every reason, in NVML bit order.
    pub const ALL: [ThrottleReason; 9] = [
        ThrottleReason::GpuIdle,
        ThrottleReason::ApplicationsClocksSetting,
        ThrottleReason::SwPowerCap,
        ThrottleReason::HwSlowdown,
        ThrottleReason::SyncBoost,
        ThrottleReason::SwThermalSlowdown,
        ThrottleReason::HwThermalSlowdown,
        ThrottleReason::HwPowerBrakeSlowdown,
        ThrottleReason::DisplayClockSetting,
    ];

    /// NVML's bit for this reason (`nvmlClocksEventReason*`).
    pub const fn bit(self) -> u64 {
        match self {
            ThrottleReason::GpuIdle => 0x1,
            ThrottleReason::ApplicationsClocksSetting => 0x2,
            ThrottleReason::SwPowerCap => 0x4,
            ThrottleReason::HwSlowdown => 0x8,
            ThrottleReason::SyncBoost => 0x10,
            ThrottleReason::SwThermalSlowdown => 0x20,
            ThrottleReason::HwThermalSlowdown => 0x40,
            ThrottleReason::HwPowerBrakeSlowdown => 0x80,
            ThrottleReason::DisplayClockSetting => 0x100,
        }
    }

    /// Stable snake_case name used in JSON and CSV.
    pub const fn name(self) -> &'static str {
        match self {
            ThrottleReason::GpuIdle => "gpu_idle",
            ThrottleReason::ApplicationsClocksSetting => "applications_clocks_setting",
            ThrottleReason::SwPowerCap => "sw_power_cap",
            ThrottleReason::HwSlowdown => "hw_slowdown",
            ThrottleReason::SyncBoost => "sync_boost",
            ThrottleReason::SwThermalSlowdown => "sw_thermal_slowdown",
            ThrottleReason::HwThermalSlowdown => "hw_thermal_slowdown",
            ThrottleReason::HwPowerBrakeSlowdown => "hw_power_brake_slowdown",
            ThrottleReason::DisplayClockSetting => "display_clock_setting",
        }
    }

    /// Short label for people ("Power cap").
    pub const fn label(self) -> &'static str {
        match self {
            ThrottleReason::GpuIdle => "Idle",
            ThrottleReason::ApplicationsClocksSetting => "Clock lock",
            ThrottleReason::SwPowerCap => "Power cap",
            ThrottleReason::HwSlowdown => "Hardware slowdown",
            ThrottleReason::SyncBoost => "Sync boost",
            ThrottleReason::SwThermalSlowdown => "Thermal (driver)",
            ThrottleReason::HwThermalSlowdown => "Thermal (hardware)",
            ThrottleReason::HwPowerBrakeSlowdown => "Power brake",
            ThrottleReason::DisplayClockSetting => "Display clock",
        }
    }

    /// One sentence in plain words, for hovers.
    pub const fn explanation(self) -> &'static str {
        match self {
            ThrottleReason::GpuIdle => "Nothing is running on the GPU, so it rests at low clocks.",
            ThrottleReason::ApplicationsClocksSetting => {
                "Clocks are held by a clock lock or application-clock setting."
            }
            ThrottleReason::SwPowerCap => {
                "The GPU reached its power limit and lowered clocks to stay under it."
            }
            ThrottleReason::HwSlowdown => {
                "The hardware halved clocks: too hot, or the power supply signalled overload."
            }
            ThrottleReason::SyncBoost => {
                "Clocks are held to match other GPUs in a sync-boost group."
            }
            ThrottleReason::SwThermalSlowdown => {
                "The GPU is above its target temperature; the driver lowers clocks to cool it."
            }
            ThrottleReason::HwThermalSlowdown => {
                "The GPU is dangerously hot; the hardware cut clocks hard. Improve cooling."
            }
            ThrottleReason::HwPowerBrakeSlowdown => {
                "An external power-brake signal (the power supply or the board) cut clocks."
            }
            ThrottleReason::DisplayClockSetting => {
                "Clocks are held down to match the display clock."
            }
        }
    }

    /// The reason with this snake_case name.
    pub fn from_name(name: &str) -> Option<ThrottleReason> {
        ThrottleReason::ALL
            .into_iter()
            .find(|reason| reason.name() == name)
    }
}

/// A set of active throttle reasons (NVML's bitmask). Serialized as a list of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ThrottleReasons {
    bits: u64,
}

impl ThrottleReasons {
    /// Active reasons in plain words ("Power cap, Thermal (driver)"), "none", or "n/a" when the
    /// card does not report them.
    pub fn summary(reasons: Option<ThrottleReasons>) -> String {
        match reasons {
            None => crate::units::NOT_AVAILABLE.to_string(),
            Some(reasons) if reasons.is_empty() => "none".to_string(),
            Some(reasons) => reasons
                .iter()
                .map(|reason| reason.label())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Keeps only the bits gputune knows; unknown future bits are dropped.
    pub fn from_bits(bits: u64) -> Self {
        let known = ThrottleReason::ALL
            .iter()
            .fold(0, |mask, reason| mask | reason.bit());
        ThrottleReasons { bits: bits & known }
    }

    pub fn bits(self) -> u64 {
        self.bits
    }

    pub fn contains(self, reason: ThrottleReason) -> bool {
        self.bits & reason.bit() != 0
    }

    pub fn insert(&mut self, reason: ThrottleReason) {
        self.bits |= reason.bit();
    }

    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    pub fn iter(self) -> impl Iterator<Item = ThrottleReason> {
        ThrottleReason::ALL
            .into_iter()
            .filter(move |reason| self.contains(*reason))
    }
}

impl FromIterator<ThrottleReason> for ThrottleReasons {
    fn from_iter<I: IntoIterator<Item = ThrottleReason>>(iter: I) -> Self {
        let mut reasons = ThrottleReasons::default();
        for reason in iter {
            reasons.insert(reason);
        }
        reasons
    }
}

impl Serialize for ThrottleReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ThrottleReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ThrottleReason::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown throttle reason \"{name}\"")))
    }
}

impl Serialize for ThrottleReasons {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(ThrottleReason::name))
    }
}

impl<'de> Deserialize<'de> for ThrottleReasons {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        names
            .iter()
            .map(|name| {
                ThrottleReason::from_name(name).ok_or_else(|| {
                    serde::de::Error::custom(format!("unknown throttle reason \"{name}\""))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bits_are_dropped_and_known_ones_kept() {
        let reasons = ThrottleReasons::from_bits(0x4 | 0x20 | 0x8000_0000);
        let names: Vec<_> = reasons.iter().map(ThrottleReason::name).collect();
        assert_eq!(names, ["sw_power_cap", "sw_thermal_slowdown"]);
        assert_eq!(reasons.bits(), 0x24);
    }

    #[test]
    fn names_round_trip_through_json() {
        let reasons: ThrottleReasons = [ThrottleReason::GpuIdle, ThrottleReason::HwSlowdown]
            .into_iter()
            .collect();
        let json = serde_json::to_string(&reasons).unwrap_or_default();
        assert_eq!(json, r#"["gpu_idle","hw_slowdown"]"#);
        let back: Result<ThrottleReasons, _> = serde_json::from_str(&json);
        assert_eq!(back.ok(), Some(reasons));
        assert!(serde_json::from_str::<ThrottleReasons>(r#"["melting"]"#).is_err());
    }
}
