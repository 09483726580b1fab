//! What a job's energy costs: the admin's `cost.toml` (read by the daemon) or a user's own (in
//! their config folder, for what `gputune jobs` and `gputune run` show), and the one line that
//! says it: "3.21 kWh, €1.05, 1.2 kg CO₂".

use std::path::{Path, PathBuf};

use crate::fsafe::{self, Links};
use gputune_formats::jobs::{CostConfig, JOULES_PER_KWH, JobCost};

/// The admin's file, read by the daemon (`gputune daemon --cost-config PATH` names another).
pub const DEFAULT_COST_CONFIG: &str = "/etc/gputune/cost.toml";
/// The user's own file's name, in their config folder.
pub const USER_COST_FILE: &str = "cost.toml";
/// A cost file is a few lines.
const MAX_COST_FILE_BYTES: u64 = 64 * 1024;
/// Sanity bounds: a price per kWh above this, or grams per kWh above that, is a typo.
const MAX_PRICE_PER_KWH: f64 = 1_000.0;
const MAX_CO2_GRAMS_PER_KWH: f64 = 5_000.0;
const MAX_CURRENCY_CHARS: usize = 8;

/// What to write in a cost file: said where no price is set.
pub const COST_HINT: &str = "set a price in cost.toml (price_per_kwh = 0.30, currency = \"€\", co2_grams_per_kwh = 350): your own in gputune's config folder, or the daemon's /etc/gputune/cost.toml";

/// A price and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    pub config: CostConfig,
    /// Whose it is ("your ~/.config/gputune/cost.toml", "the daemon's /etc/gputune/cost.toml").
    pub from: String,
}

impl Price {
    /// The cost and CO₂ of `energy_j` at this price.
    pub fn job_cost(&self, energy_j: f64) -> JobCost {
        let kwh = energy_j / JOULES_PER_KWH;
        JobCost {
            price: self.config.clone(),
            cost: self.config.price_per_kwh.map(|price| kwh * price),
            co2_kg: self
                .config
                .co2_grams_per_kwh
                .map(|grams| kwh * grams / 1000.0),
            from: self.from.clone(),
        }
    }
}

/// Reads a cost file: `Ok(None)` when there is none, an error that says what is wrong with
/// one that cannot be used.
pub fn read_cost_file(path: &Path) -> Result<Option<CostConfig>, String> {
    let bytes = match fsafe::read_limited(path, MAX_COST_FILE_BYTES, Links::Follow) {
        Ok(bytes) => bytes,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(error.to_string()),
    };
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text.", path.display()))?;
    let config: CostConfig = toml::from_str(&text)
        .map_err(|error| format!("{} could not be read: {}", path.display(), error.message()))?;
    check(&config).map_err(|why| format!("{}: {why}", path.display()))?;
    Ok(Some(config))
}

/// Refuses a price no one means.
pub fn check(config: &CostConfig) -> Result<(), String> {
    if config.price_per_kwh.is_none() && config.co2_grams_per_kwh.is_none() {
        return Err(
            "it sets neither price_per_kwh nor co2_grams_per_kwh; set one of them.".to_string(),
        );
    }
    if let Some(price) = config.price_per_kwh {
        if !(0.0..=MAX_PRICE_PER_KWH).contains(&price) {
            return Err(format!(
                "price_per_kwh = {price} is not a price between 0 and {MAX_PRICE_PER_KWH}."
            ));
        }
        match config.currency.as_deref().map(str::trim) {
            None | Some("") => {
                return Err(
                    "price_per_kwh needs its currency, e.g. currency = \"€\" or \"USD\"."
                        .to_string(),
                );
            }
            Some(currency)
                if currency.chars().count() > MAX_CURRENCY_CHARS
                    || currency.chars().any(char::is_control) =>
            {
                return Err(format!(
                    "currency is a symbol or a code of at most {MAX_CURRENCY_CHARS} characters (\"€\", \"USD\")."
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(grams) = config.co2_grams_per_kwh
        && !(0.0..=MAX_CO2_GRAMS_PER_KWH).contains(&grams)
    {
        return Err(format!(
            "co2_grams_per_kwh = {grams} is not between 0 and {MAX_CO2_GRAMS_PER_KWH}."
        ));
    }
    Ok(())
}

/// The user's own cost file in `config_dir`.
pub fn user_cost_path(config_dir: &Path) -> PathBuf {
    config_dir.join(USER_COST_FILE)
}

/// The user's own price, if they set one; a file that cannot be used is said on `messages`
/// and ignored.
pub fn user_price(config_dir: Option<&Path>, messages: &mut dyn std::io::Write) -> Option<Price> {
    let path = user_cost_path(config_dir?);
    match read_cost_file(&path) {
        Ok(config) => config.map(|config| Price {
            config,
            from: format!("your {}", path.display()),
        }),
        Err(why) => {
            let _ = writeln!(messages, "gputune: your price is not used: {why}");
            None
        }
    }
}

/// Decimals that show a small amount's first two digits ("0.00014"), two for larger ones.
fn decimals(value: f64) -> usize {
    let value = value.abs();
    if !value.is_finite() || value == 0.0 || value >= 0.1 {
        return 2;
    }
    ((-value.log10()).ceil() as usize + 1).clamp(2, 8)
}

/// "3.21 kWh", "42.2 kWh", "0.00014 kWh".
pub fn format_kwh(kwh: f64) -> String {
    let digits = if kwh >= 10.0 { 1 } else { decimals(kwh) };
    format!("{kwh:.digits$} kWh")
}

/// "€1.05" (a symbol goes before), "1.05 CHF" (a code of letters goes after), "€0.000045".
pub fn format_money(amount: f64, currency: &str) -> String {
    let currency = currency.trim();
    let digits = decimals(amount);
    if !currency.is_empty() && currency.chars().all(|c| c.is_ascii_alphabetic()) {
        format!("{amount:.digits$} {currency}")
    } else {
        format!("{currency}{amount:.digits$}")
    }
}

/// "1.2 kg CO₂", "0.040 kg CO₂", "0.4 g CO₂".
pub fn format_co2(kg: f64) -> String {
    if kg >= 1.0 {
        format!("{kg:.1} kg CO₂")
    } else if kg >= 0.01 {
        format!("{kg:.3} kg CO₂")
    } else {
        format!("{:.1} g CO₂", kg * 1000.0)
    }
}

/// "3.21 kWh, €1.05, 1.2 kg CO₂": the energy, then what the price sets.
pub fn cost_line(energy_j: f64, cost: Option<&JobCost>) -> String {
    let mut parts = vec![format_kwh(energy_j / JOULES_PER_KWH)];
    if let Some(cost) = cost {
        if let (Some(amount), Some(currency)) = (cost.cost, cost.price.currency.as_deref()) {
            parts.push(format_money(amount, currency));
        }
        if let Some(kg) = cost.co2_kg {
            parts.push(format_co2(kg));
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(price: Option<f64>, currency: Option<&str>, grams: Option<f64>) -> Price {
        Price {
            config: CostConfig {
                price_per_kwh: price,
                currency: currency.map(str::to_string),
                co2_grams_per_kwh: grams,
            },
            from: "the test's".to_string(),
        }
    }

    #[test]
    fn the_line_says_kwh_money_and_co2_as_the_issue_writes_them() {
        let energy_j = 3.21 * JOULES_PER_KWH;
        let euro = price(Some(0.327), Some("€"), Some(374.0)).job_cost(energy_j);
        assert_eq!(
            cost_line(energy_j, Some(&euro)),
            "3.21 kWh, €1.05, 1.2 kg CO₂"
        );
        let francs = price(Some(0.327), Some("CHF"), None).job_cost(energy_j);
        assert_eq!(cost_line(energy_j, Some(&francs)), "3.21 kWh, 1.05 CHF");
        assert_eq!(cost_line(energy_j, None), "3.21 kWh");
        let small = price(Some(0.30), Some("$"), Some(400.0)).job_cost(3_600.0);
        assert_eq!(
            cost_line(3_600.0, Some(&small)),
            "0.0010 kWh, $0.00030, 0.4 g CO₂"
        );
        assert_eq!(format_kwh(42.25), "42.2 kWh");
        assert_eq!(format_kwh(0.000_139), "0.00014 kWh");
        assert_eq!(format_money(0.000_045, "€"), "€0.000045");
        assert_eq!(format_money(0.0, "€"), "€0.00");
    }

    #[test]
    fn a_cost_file_that_cannot_be_used_says_what_is_wrong() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("cost.toml");
        assert_eq!(read_cost_file(&path), Ok(None));
        for (text, says) in [
            ("price_per_kwh = 0.3\n", "needs its currency"),
            ("price_per_kwh = -1\ncurrency = \"€\"\n", "not a price"),
            ("currency = \"€\"\n", "neither"),
            ("co2_grams_per_kwh = 1e9\n", "not between"),
            ("price = 3\n", "unknown field"),
            ("price_per_kwh = \n", "could not be read"),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = read_cost_file(&path).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        std::fs::write(&path, "price_per_kwh = 0.3\ncurrency = \"€\"\n").unwrap();
        assert_eq!(
            read_cost_file(&path).unwrap().and_then(|c| c.price_per_kwh),
            Some(0.3)
        );
    }
}
