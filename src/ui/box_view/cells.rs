//! What each of the Box view's cells says about one card, from the reading the window already
//! has: pure text and a tone, no egui, so each is tested on its own.

use gputune_formats::card::Telemetry;
use gputune_formats::throttle::{ThrottleReason, ThrottleReasons};
use gputune_formats::units::{NOT_AVAILABLE, or_na, watts};

/// How a cell is coloured: plain, fine, worth a look, wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Warning,
    Bad,
}

/// One cell: its text, its tone, and what hovering it adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub tone: Tone,
    pub hover: Option<String>,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            tone: Tone::Plain,
            hover: None,
        }
    }

    fn toned(text: impl Into<String>, tone: Tone) -> Cell {
        Cell {
            text: text.into(),
            tone,
            hover: None,
        }
    }

    fn with_hover(mut self, hover: impl Into<String>) -> Cell {
        self.hover = Some(hover.into());
        self
    }
}

/// Text from the engines made drawable: the window's font has no arrows ("GPU 2 → GPU 5" reads
/// "GPU 2 to GPU 5", "host↔device" "host and device").
pub fn drawable(text: &str) -> String {
    text.replace(" → ", " to ")
        .replace('→', " to ")
        .replace('↔', " and ")
}

/// Below this many degrees to the slowdown temperature a card is worth a look.
pub const HEADROOM_WARNING_C: i64 = 10;
/// At or above this utilization a card is busy: its PCIe link runs at what the slot gives.
pub const BUSY_UTILIZATION_PCT: u32 = 30;

/// The slot: the PCI bus id without the all-zero domain ("41:00.0"), in full on hover.
pub fn slot(pci_bus_id: &str) -> Cell {
    let short = match pci_bus_id.split_once(':') {
        Some((domain, rest)) if domain.chars().all(|c| c == '0') => rest,
        _ => pci_bus_id,
    };
    Cell::plain(short).with_hover(format!("PCI bus id {pci_bus_id}"))
}

/// Degrees between the card's temperature and where it starts slowing itself down.
pub fn headroom_c(temperature_c: Option<u32>, slowdown_c: Option<u32>) -> Option<i64> {
    Some(i64::from(slowdown_c?) - i64::from(temperature_c?))
}

/// The temperature, coloured by its headroom.
pub fn temperature(reading: &Telemetry, slowdown_c: Option<u32>) -> Cell {
    let tone = headroom_tone(headroom_c(reading.temperature_c, slowdown_c));
    Cell::toned(or_na(reading.temperature_c, |c| format!("{c} °C")), tone)
}

fn headroom_tone(headroom_c: Option<i64>) -> Tone {
    match headroom_c {
        Some(c) if c <= 0 => Tone::Bad,
        Some(c) if c < HEADROOM_WARNING_C => Tone::Warning,
        _ => Tone::Plain,
    }
}

/// "12 °C" to the slowdown temperature, "at slowdown" past it; the threshold on hover.
pub fn headroom(reading: &Telemetry, slowdown_c: Option<u32>) -> Cell {
    let Some(slowdown) = slowdown_c else {
        return Cell::plain(NOT_AVAILABLE)
            .with_hover("The card does not say where it starts slowing itself down.");
    };
    let Some(degrees) = headroom_c(reading.temperature_c, slowdown_c) else {
        return Cell::plain(NOT_AVAILABLE);
    };
    let text = if degrees <= 0 {
        format!("at slowdown (+{} °C)", -degrees)
    } else {
        format!("{degrees} °C")
    };
    Cell::toned(text, headroom_tone(Some(degrees))).with_hover(format!(
        "{degrees} °C below {slowdown} °C, where this card starts slowing itself down"
    ))
}

/// "402 W of 450 W": the draw against the limit the card enforces.
pub fn power(reading: &Telemetry) -> Cell {
    match (reading.power_draw_mw, reading.power_limit_mw) {
        (Some(draw_mw), Some(limit_mw)) => {
            Cell::plain(format!("{} of {}", watts(draw_mw), watts(limit_mw)))
        }
        (Some(draw_mw), None) => Cell::plain(watts(draw_mw)),
        _ => Cell::plain(NOT_AVAILABLE),
    }
}

/// A clock in MHz.
pub fn clock(mhz: Option<u32>) -> Cell {
    Cell::plain(or_na(mhz, |mhz| format!("{mhz} MHz")))
}

/// Reasons that cost a training job speed it did not choose: heat, the hardware, the supply.
const SLOWING_REASONS: [ThrottleReason; 4] = [
    ThrottleReason::SwThermalSlowdown,
    ThrottleReason::HwThermalSlowdown,
    ThrottleReason::HwSlowdown,
    ThrottleReason::HwPowerBrakeSlowdown,
];

/// Whether the card slows down for heat.
pub fn thermal_throttling(reasons: Option<ThrottleReasons>) -> bool {
    reasons.is_some_and(|reasons| {
        reasons.contains(ThrottleReason::SwThermalSlowdown)
            || reasons.contains(ThrottleReason::HwThermalSlowdown)
    })
}

/// The throttle reasons now; heat, a hardware slowdown or a power brake are worth a look.
pub fn throttle(reasons: Option<ThrottleReasons>) -> Cell {
    let text = ThrottleReasons::summary(reasons);
    let Some(reasons) = reasons.filter(|reasons| !reasons.is_empty()) else {
        return Cell::plain(text);
    };
    let slowing = SLOWING_REASONS
        .iter()
        .any(|reason| reasons.contains(*reason));
    let explained: Vec<&str> = reasons.iter().map(|reason| reason.explanation()).collect();
    Cell::toned(text, if slowing { Tone::Warning } else { Tone::Plain })
        .with_hover(explained.join("\n"))
}

/// Whether the card works now: only then does its PCIe link run at what its slot gives (an
/// idle card rests its link at a low generation).
pub fn busy(reading: &Telemetry) -> bool {
    let idle = reading
        .throttle_reasons
        .is_some_and(|reasons| reasons.contains(ThrottleReason::GpuIdle));
    !idle
        && reading
            .utilization_gpu_pct
            .is_some_and(|pct| pct >= BUSY_UTILIZATION_PCT)
}

/// The link now against the most the card and slot allow: "Gen 4 x8 of 4 x16". Said as
/// reached only under load; an idle card at Gen 1 is normal.
pub fn pcie_link(reading: &Telemetry) -> (Cell, Cell) {
    let (Some(generation), Some(width)) = (reading.pcie_link_gen, reading.pcie_link_width) else {
        return (Cell::plain(NOT_AVAILABLE), Cell::plain(""));
    };
    let max_text = match (reading.pcie_link_gen_max, reading.pcie_link_width_max) {
        (Some(max_generation), Some(max_width)) => format!(" of {max_generation} x{max_width}"),
        _ => String::new(),
    };
    let now = format!("Gen {generation} x{width}{max_text}");
    if !busy(reading) {
        let hover = "An idle card rests its link at a low generation: normal. What the slot \
                     gives shows under load (or with Test the links).";
        return (
            Cell::plain(now).with_hover(hover),
            Cell::plain("idle: normal").with_hover(hover),
        );
    }
    let narrower = reading
        .pcie_link_width_max
        .is_some_and(|max_width| width < max_width);
    let slower = reading
        .pcie_link_gen_max
        .is_some_and(|max_generation| generation < max_generation);
    if !(narrower || slower) {
        return (
            Cell::toned(now, Tone::Good),
            Cell::toned("reached under load", Tone::Good),
        );
    }
    let share = link_share(reading).map_or(String::new(), |share| {
        format!(
            " The slot gives {:.0} % of the card's bandwidth: its share of a data-parallel \
             job's all-reduce is that much slower.",
            share * 100.0
        )
    });
    (
        Cell::toned(now, Tone::Warning).with_hover(format!(
            "Under load the link stays below its maximum.{share}"
        )),
        Cell::toned("under load: below max", Tone::Warning),
    )
}

/// The bandwidth the link gives now as a share of its maximum (each generation doubles it).
pub fn link_share(reading: &Telemetry) -> Option<f64> {
    let generations = reading
        .pcie_link_gen_max?
        .checked_sub(reading.pcie_link_gen?)?;
    let width_share = f64::from(reading.pcie_link_width?) / f64::from(reading.pcie_link_width_max?);
    let generation_share = 0.5_f64.powi(i32::try_from(generations).ok()?);
    Some(width_share * generation_share)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading() -> Telemetry {
        Telemetry {
            temperature_c: Some(74),
            utilization_gpu_pct: Some(98),
            power_draw_mw: Some(402_000),
            power_limit_mw: Some(450_000),
            pcie_link_gen: Some(4),
            pcie_link_width: Some(16),
            pcie_link_gen_max: Some(4),
            pcie_link_width_max: Some(16),
            ..Telemetry::default()
        }
    }

    #[test]
    fn arrows_become_words() {
        assert_eq!(drawable("GPU 2 → GPU 5"), "GPU 2 to GPU 5");
        assert_eq!(drawable("GPU 3: host↔device"), "GPU 3: host and device");
    }

    #[test]
    fn the_slot_drops_an_all_zero_domain_only() {
        assert_eq!(slot("00000000:41:00.0").text, "41:00.0");
        assert_eq!(slot("00000001:41:00.0").text, "00000001:41:00.0");
        assert_eq!(slot("weird").text, "weird");
    }

    #[test]
    fn headroom_is_to_the_slowdown_temperature_and_coloured_by_it() {
        let cool = reading();
        assert_eq!(headroom(&cool, Some(90)).text, "16 °C");
        assert_eq!(headroom(&cool, Some(90)).tone, Tone::Plain);
        let hot = Telemetry {
            temperature_c: Some(86),
            ..reading()
        };
        assert_eq!(headroom(&hot, Some(90)).text, "4 °C");
        assert_eq!(temperature(&hot, Some(90)).tone, Tone::Warning);
        let past = Telemetry {
            temperature_c: Some(92),
            ..reading()
        };
        assert_eq!(headroom(&past, Some(90)).text, "at slowdown (+2 °C)");
        assert_eq!(headroom(&past, Some(90)).tone, Tone::Bad);
        assert_eq!(headroom(&cool, None).text, NOT_AVAILABLE);
    }

    #[test]
    fn power_is_the_draw_against_the_limit() {
        assert_eq!(power(&reading()).text, "402 W of 450 W");
        assert_eq!(power(&Telemetry::default()).text, NOT_AVAILABLE);
    }

    #[test]
    fn heat_throttling_is_worth_a_look_a_power_cap_is_not() {
        let cap: ThrottleReasons = [ThrottleReason::SwPowerCap].into_iter().collect();
        assert_eq!(throttle(Some(cap)).tone, Tone::Plain);
        let heat: ThrottleReasons = [
            ThrottleReason::SwPowerCap,
            ThrottleReason::SwThermalSlowdown,
        ]
        .into_iter()
        .collect();
        assert_eq!(throttle(Some(heat)).text, "Power cap, Thermal (driver)");
        assert_eq!(throttle(Some(heat)).tone, Tone::Warning);
        assert!(thermal_throttling(Some(heat)));
        assert!(!thermal_throttling(Some(cap)));
        assert_eq!(throttle(None).text, NOT_AVAILABLE);
    }

    #[test]
    fn an_idle_card_at_gen_1_is_normal_a_busy_one_at_x8_is_not() {
        let idle = Telemetry {
            utilization_gpu_pct: Some(0),
            pcie_link_gen: Some(1),
            ..reading()
        };
        let (now, said) = pcie_link(&idle);
        assert_eq!(now.text, "Gen 1 x16 of 4 x16");
        assert_eq!(
            (now.tone, said.text.as_str()),
            (Tone::Plain, "idle: normal")
        );

        let (now, said) = pcie_link(&reading());
        assert_eq!(
            (now.tone, said.text.as_str()),
            (Tone::Good, "reached under load")
        );

        let narrow = Telemetry {
            pcie_link_width: Some(8),
            ..reading()
        };
        let (now, said) = pcie_link(&narrow);
        assert_eq!(now.text, "Gen 4 x8 of 4 x16");
        assert_eq!((now.tone, said.tone), (Tone::Warning, Tone::Warning));
        assert!(now.hover.is_some_and(|hover| hover.contains("50 %")));
        assert_eq!(link_share(&narrow), Some(0.5));
        let gen3 = Telemetry {
            pcie_link_gen: Some(3),
            pcie_link_width: Some(8),
            ..reading()
        };
        assert_eq!(link_share(&gen3), Some(0.25));
        assert_eq!(pcie_link(&Telemetry::default()).0.text, NOT_AVAILABLE);
    }

    #[test]
    fn a_card_marked_idle_by_the_driver_is_not_busy() {
        let mut marked: Telemetry = reading();
        marked.throttle_reasons = Some([ThrottleReason::GpuIdle].into_iter().collect());
        assert!(!busy(&marked));
        assert!(busy(&reading()));
        assert!(!busy(&Telemetry {
            utilization_gpu_pct: None,
            ..reading()
        }));
    }
}
