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

/// A number as people write it: 315 → "315", 66.67 → "66.67".
pub fn plain_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// A power limit's share of the card's default in percent, one decimal at most ("70",
/// "70.5"); `None` when the default is unknown.
pub fn percent_of_default(limit_mw: u32, default_mw: Option<u32>) -> Option<String> {
    let default_mw = default_mw.filter(|default_mw| *default_mw > 0)?;
    let percent = f64::from(limit_mw) / f64::from(default_mw) * 100.0;
    Some(plain_number((percent * 10.0).round() / 10.0))
}

/// A power limit with its share of the card's default when known: "315 W (70 % of 450 W)".
pub fn power_limit_with_share(limit_mw: u32, default_mw: Option<u32>) -> String {
    match (percent_of_default(limit_mw, default_mw), default_mw) {
        (Some(percent), Some(default_mw)) => format!(
            "{} ({percent} % of {})",
            watts_exact(limit_mw),
            watts_exact(default_mw)
        ),
        _ => watts_exact(limit_mw),
    }
}

/// A card's power-limit range in watts and, when its default is known, in % of the default
/// (the two ways a user may ask): "150 W to 600 W (33 % to 133 % of its 450 W default)".
pub fn power_limit_range(min_mw: u32, max_mw: u32, default_mw: Option<u32>) -> String {
    let watts = format!("{} to {}", watts_exact(min_mw), watts_exact(max_mw));
    match default_mw.filter(|default_mw| *default_mw > 0) {
        Some(default_mw) => {
            let percent = |mw: u32| (f64::from(mw) * 100.0 / f64::from(default_mw)).round();
            format!(
                "{watts} ({} % to {} % of its {} default)",
                percent(min_mw),
                percent(max_mw),
                watts_exact(default_mw)
            )
        }
        None => watts,
    }
}

/// Bytes in a mebibyte.
pub const BYTES_PER_MIB: u64 = 1 << 20;

/// Whole mebibytes, rounded down, for tables ("21450").
pub fn mib(bytes: u64) -> u64 {
    bytes / BYTES_PER_MIB
}

/// Bytes as whole MiB with the unit ("21450 MiB").
pub fn mib_text(bytes: u64) -> String {
    format!("{} MiB", mib(bytes))
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

/// A parameter count as people write it: "8.03 B", "124 M", "25.6 M", "13.5 k".
pub fn parameters(count: u64) -> String {
    let count = count as f64;
    let (value, unit) = if count >= 1e9 {
        (count / 1e9, "B")
    } else if count >= 1e6 {
        (count / 1e6, "M")
    } else if count >= 1e3 {
        (count / 1e3, "k")
    } else {
        return format!("{count:.0}");
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else if value >= 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.2} {unit}")
    }
}

/// A count as people read it: "812", "45,210", "3.1 × 10¹²" (a million and up).
pub fn large_count(count: u64) -> String {
    if count < 1_000_000 {
        let digits = count.to_string();
        let mut grouped = String::new();
        for (position, digit) in digits.chars().enumerate() {
            if position > 0 && (digits.len() - position).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(digit);
        }
        return grouped;
    }
    let exponent = (count as f64).log10().floor() as i32;
    let mantissa = count as f64 / 10f64.powi(exponent);
    // Rounding may give 10.0: carry it into the exponent.
    let (mantissa, exponent) = if (mantissa * 10.0).round() >= 100.0 {
        (1.0, exponent + 1)
    } else {
        (mantissa, exponent)
    };
    const SUPERSCRIPTS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let power: String = exponent
        .to_string()
        .chars()
        .filter_map(|digit| digit.to_digit(10).map(|value| SUPERSCRIPTS[value as usize]))
        .collect();
    format!("{mantissa:.1} × 10{power}")
}

/// A span of time as people say it: "45 s", "3 min 12 s", "10 min", "2 h 5 min".
pub fn duration_s(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "?".to_string();
    }
    if seconds < 10.0 {
        return format!("{seconds:.1} s");
    }
    let whole = seconds.round() as u64;
    let (hours, minutes, secs) = (whole / 3600, whole % 3600 / 60, whole % 60);
    match (hours, minutes, secs) {
        (0, 0, s) => format!("{s} s"),
        (0, m, 0) => format!("{m} min"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, 0, _) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

/// A clock range as read: "2415–2745 MHz", "2520 MHz" when it never moved; None without both.
pub fn clock_range_mhz(low_mhz: Option<u32>, high_mhz: Option<u32>) -> Option<String> {
    match (low_mhz?, high_mhz?) {
        (low, high) if low == high => Some(format!("{low} MHz")),
        (low, high) => Some(format!("{low}–{high} MHz")),
    }
}

/// `value` formatted by `format`, or "n/a".
pub fn or_na<T>(value: Option<T>, format: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| NOT_AVAILABLE.to_string(), format)
}

/// A Unix time in ms as local wall-clock time in chrono's `format` ("%H:%M:%S",
/// "%-d %b %H:%M"); "?" for a time that cannot be shown.
pub fn local_time(at_ms: u64, format: &str) -> String {
    use chrono::TimeZone;
    i64::try_from(at_ms)
        .ok()
        .and_then(|millis| chrono::Local.timestamp_millis_opt(millis).single())
        .map_or_else(|| "?".to_string(), |time| time.format(format).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_counts_are_grouped_or_written_as_powers_of_ten() {
        assert_eq!(large_count(812), "812");
        assert_eq!(large_count(45_210), "45,210");
        assert_eq!(large_count(3_100_000_000_000), "3.1 × 10¹²");
        assert_eq!(large_count(9_990_000), "1.0 × 10⁷");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_s(2.04), "2.0 s");
        assert_eq!(duration_s(45.0), "45 s");
        assert_eq!(duration_s(192.0), "3 min 12 s");
        assert_eq!(duration_s(600.0), "10 min");
        assert_eq!(duration_s(7500.0), "2 h 5 min");
        assert_eq!(duration_s(f64::NAN), "?");
    }

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

    #[test]
    fn a_power_limit_says_its_share_of_the_default_once_for_every_front_end() {
        assert_eq!(
            power_limit_with_share(315_000, Some(450_000)),
            "315 W (70 % of 450 W)"
        );
        assert_eq!(
            power_limit_with_share(317_250, Some(450_000)),
            "317.25 W (70.5 % of 450 W)"
        );
        assert_eq!(power_limit_with_share(315_000, None), "315 W");
        assert_eq!(power_limit_with_share(315_000, Some(0)), "315 W");
        assert_eq!(
            percent_of_default(450_000, Some(450_000)).as_deref(),
            Some("100")
        );
        assert_eq!(plain_number(66.67), "66.67");
        assert_eq!(plain_number(315.0), "315");
    }

    #[test]
    fn parameter_counts_read_as_people_write_them() {
        assert_eq!(parameters(8_030_261_248), "8.03 B");
        assert_eq!(parameters(70_553_706_496), "70.6 B");
        assert_eq!(parameters(124_439_808), "124 M");
        assert_eq!(parameters(25_557_032), "25.6 M");
        assert_eq!(parameters(41_943_040), "41.9 M");
        assert_eq!(parameters(13_500), "13.5 k");
        assert_eq!(parameters(0), "0");
        assert_eq!(mib(3 << 20), 3);
        assert_eq!(mib_text(21_450 << 20), "21450 MiB");
    }

    #[test]
    fn a_time_that_cannot_be_shown_is_a_question_mark() {
        assert_eq!(local_time(u64::MAX, "%H:%M"), "?");
        assert_eq!(local_time(1_700_000_000_000, "%S"), "20");
    }
}
