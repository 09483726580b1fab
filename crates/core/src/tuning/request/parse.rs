//! The command line's text as requests: "70%", "315W", "210,2520", "+150", "auto". Every
//! refusal names the option, the text and the form it wants; the values are checked against
//! a card later (`TuneRequest::validated`).

use super::{FanRequest, PowerLimitRequest, RequestError};

/// Spelled out for `Unparsable`, so every parser names the form it wants.
const POWER_LIMIT_FORM: &str =
    "watts (\"315W\" or \"315\") or a percentage of the default limit (\"70%\")";
const CLOCK_RANGE_FORM: &str = "two whole numbers of MHz, MIN,MAX (e.g. \"210,2520\")";
const OFFSET_FORM: &str = "a whole number of MHz, e.g. \"+150\" or \"-200\"";
const FAN_FORM: &str = "a whole percentage (e.g. \"60\") or \"auto\"";

/// Parses a power limit: "70%", "70 %", "315W", "315w", "315 W", or "315" (watts).
pub fn parse_power_limit(
    option: &'static str,
    text: &str,
) -> Result<PowerLimitRequest, RequestError> {
    let unparsable = || RequestError::Unparsable {
        option,
        text: text.to_string(),
        expected: POWER_LIMIT_FORM,
    };
    let trimmed = text.trim();
    let (number, percent) = if let Some(number) = trimmed.strip_suffix('%') {
        (number, true)
    } else if let Some(number) = trimmed
        .strip_suffix('W')
        .or_else(|| trimmed.strip_suffix('w'))
    {
        (number, false)
    } else {
        (trimmed, false)
    };
    let value = parse_finite(number.trim()).ok_or_else(unparsable)?;
    Ok(if percent {
        PowerLimitRequest::Percent(value)
    } else if number.len() == trimmed.len() {
        PowerLimitRequest::Unitless(value)
    } else {
        PowerLimitRequest::Watts(value)
    })
}

/// Parses a clock range "MIN,MAX" in MHz (spaces allowed around the numbers).
pub fn parse_clock_range(option: &'static str, text: &str) -> Result<(u32, u32), RequestError> {
    let unparsable = || RequestError::Unparsable {
        option,
        text: text.to_string(),
        expected: CLOCK_RANGE_FORM,
    };
    let (min, max) = text.split_once(',').ok_or_else(unparsable)?;
    let min_mhz = parse_mhz(min).ok_or_else(unparsable)?;
    let max_mhz = parse_mhz(max).ok_or_else(unparsable)?;
    Ok((min_mhz, max_mhz))
}

/// Parses a signed clock offset in MHz: "150", "+150", "-200", "-200MHz".
pub fn parse_offset(option: &'static str, text: &str) -> Result<i32, RequestError> {
    let trimmed = text.trim();
    let number = strip_suffix_ignoring_case(trimmed, "mhz").unwrap_or(trimmed);
    number.trim().parse().map_err(|_| RequestError::Unparsable {
        option,
        text: text.to_string(),
        expected: OFFSET_FORM,
    })
}

/// Parses a fan request: "60", "60%", or "auto".
pub fn parse_fan(option: &'static str, text: &str) -> Result<FanRequest, RequestError> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("auto") {
        return Ok(FanRequest::Automatic);
    }
    let number = trimmed.strip_suffix('%').unwrap_or(trimmed).trim();
    number
        .parse()
        .map(FanRequest::Percent)
        .map_err(|_| RequestError::Unparsable {
            option,
            text: text.to_string(),
            expected: FAN_FORM,
        })
}

fn parse_finite(text: &str) -> Option<f64> {
    // Rust's float parser accepts "inf" and "NaN"; a power limit is neither.
    text.parse::<f64>().ok().filter(|value| value.is_finite())
}

fn parse_mhz(text: &str) -> Option<u32> {
    let trimmed = text.trim();
    strip_suffix_ignoring_case(trimmed, "mhz")
        .unwrap_or(trimmed)
        .trim()
        .parse()
        .ok()
}

fn strip_suffix_ignoring_case<'a>(text: &'a str, suffix: &str) -> Option<&'a str> {
    let split = text.len().checked_sub(suffix.len())?;
    let (head, tail) = (text.get(..split)?, text.get(split..)?);
    tail.eq_ignore_ascii_case(suffix).then_some(head)
}

#[cfg(test)]
mod tests {
    use super::super::tests::message;
    use super::*;

    #[test]
    fn power_limits_parse_as_percent_or_watts() {
        let parse = |text| parse_power_limit("--power-limit", text);
        assert_eq!(parse("70%"), Ok(PowerLimitRequest::Percent(70.0)));
        assert_eq!(parse(" 70 % "), Ok(PowerLimitRequest::Percent(70.0)));
        assert_eq!(parse("315W"), Ok(PowerLimitRequest::Watts(315.0)));
        assert_eq!(parse("315w"), Ok(PowerLimitRequest::Watts(315.0)));
        assert_eq!(parse("315 W"), Ok(PowerLimitRequest::Watts(315.0)));
        assert_eq!(parse("315"), Ok(PowerLimitRequest::Unitless(315.0)));
        assert_eq!(parse("312.5W"), Ok(PowerLimitRequest::Watts(312.5)));
        for bad in [
            "", "%", "W", "abc", "NaN", "inf%", "1e400", "70%%", "315 kW",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            message(parse("lots")),
            "--power-limit \"lots\" is not understood: expected watts (\"315W\" or \"315\") or a percentage of the default limit (\"70%\")."
        );
    }

    #[test]
    fn clock_ranges_offsets_and_fans_parse() {
        assert_eq!(
            parse_clock_range("--lock-gpu-clocks", "210,2520"),
            Ok((210, 2520))
        );
        assert_eq!(
            parse_clock_range("--lock-gpu-clocks", " 210 , 2520MHz"),
            Ok((210, 2520))
        );
        for bad in ["210", "210-2520", "-1,5", "a,b", "1,2,3", "99999999999,1"] {
            assert!(
                parse_clock_range("--lock-gpu-clocks", bad).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(parse_offset("--gpu-clock-offset", "+150"), Ok(150));
        assert_eq!(parse_offset("--gpu-clock-offset", "-200MHz"), Ok(-200));
        assert!(parse_offset("--gpu-clock-offset", "1.5").is_err());
        assert!(parse_offset("--gpu-clock-offset", "3000000000").is_err());
        assert_eq!(parse_fan("--fan-speed", "60"), Ok(FanRequest::Percent(60)));
        assert_eq!(
            parse_fan("--fan-speed", "60 %"),
            Ok(FanRequest::Percent(60))
        );
        assert_eq!(parse_fan("--fan-speed", "AUTO"), Ok(FanRequest::Automatic));
        assert!(parse_fan("--fan-speed", "-5").is_err());
        assert!(parse_fan("--fan-speed", "fast").is_err());
    }
}
