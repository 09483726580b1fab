//! Turning raw readings into text for people: units always shown, "n/a" for readings a card
//! does not report. A leaf: it knows numbers, not devices.

/// What a missing reading shows as.
pub const NOT_AVAILABLE: &str = "n/a";

/// Milliwatts as watts, one decimal below 100 W ("87.5 W", "412 W").
pub fn watts(milliwatts: u32) -> String {
    let watts = f64::from(milliwatts) / 1000.0;
    if watts < 100.0 {
        format!("{watts:.1} W")
    } else {
        format!("{watts:.0} W")
    }
}

/// Milliwatts as exact watts, for limits and settings: "315 W", "312.5 W".
pub fn watts_exact(milliwatts: u32) -> String {
    if milliwatts.is_multiple_of(1000) {
        format!("{} W", milliwatts / 1000)
    } else {
        format!("{} W", f64::from(milliwatts) / 1000.0)
    }
}

/// Bytes as GiB with one decimal ("21.4 GiB").
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

/// Millijoules as kWh or Wh, whichever reads better.
pub fn energy(millijoules: u64) -> String {
    let watt_hours = millijoules as f64 / 3_600_000.0;
    if watt_hours >= 1000.0 {
        format!("{:.2} kWh", watt_hours / 1000.0)
    } else {
        format!("{watt_hours:.1} Wh")
    }
}

/// `value` formatted by `format`, or "n/a".
pub fn or_na<T>(value: Option<T>, format: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| NOT_AVAILABLE.to_string(), format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_carry_units_and_missing_ones_say_na() {
        assert_eq!(watts(87_450), "87.5 W");
        assert_eq!(watts(412_300), "412 W");
        assert_eq!(watts_exact(315_000), "315 W");
        assert_eq!(watts_exact(312_500), "312.5 W");
        assert_eq!(gib(24_564 * 1024 * 1024), "24.0 GiB");
        assert_eq!(energy(7_200_000), "2.0 Wh");
        assert_eq!(energy(5_400_000_000_000 / 1000), "1.50 kWh");
        assert_eq!(or_na(None::<u32>, |c| format!("{c} °C")), "n/a");
        assert_eq!(or_na(Some(67u32), |c| format!("{c} °C")), "67 °C");
    }
}
