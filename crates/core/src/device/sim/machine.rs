//! A whole simulated box: its cards, each with its UUID and PCI bus, warm and settled when the
//! machine is made; and which simulated model a UUID belongs to.

use serde::{Deserialize, Serialize};

use super::SimScenario;
use super::card::CardSpec;
use super::load::LoadPattern;
use super::physics::SimGpu;
use super::seed::splitmix64;

/// How long a new machine has already been running when it is first read, so it starts warm
/// and settled rather than at room temperature.
const WARM_UP_MS: u64 = 10 * 60 * 1000;

/// The 8-GPU box's hot slot: GPU 3's intake sits against GPU 2's backplate, so its fans move
/// a fraction of the air the others' do; under training it runs ~12 °C hotter than its
/// neighbours and past its thermal target (SW thermal slowdown).
pub const HOT_SLOT_GPU: usize = 3;
const HOT_SLOT_AIRFLOW_SHARE: f64 = 0.45;
/// The 8-GPU box's narrow link: GPU 5 trained at x8 of its x16 (a riser's contacts).
pub const NARROW_LINK_GPU: usize = 5;
const NARROW_LINK_WIDTH: u32 = 8;

/// A whole simulated box: its GPUs. Serializable, so the fake NVML library can keep it in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimMachine {
    pub scenario: SimScenario,
    pub gpus: Vec<SimGpu>,
    /// The machine went down (its power supply tripped, `supply.rs`): every GPU answers lost
    /// until it is made anew (a reboot). Why it went down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<String>,
}

impl SimMachine {
    /// A machine that has run `load` for ten minutes before `now_ms`.
    pub fn new(scenario: SimScenario, load: LoadPattern, now_ms: u64) -> SimMachine {
        let start_ms = now_ms.saturating_sub(WARM_UP_MS);
        let gpus = match scenario {
            SimScenario::Rtx4090 => vec![rtx4090(0, 25.0, load, start_ms)],
            SimScenario::EightRtx4090 => {
                // Cards in the middle of the box breathe air their neighbours warmed.
                let ambient_c = [25.0, 28.0, 31.0, 33.0, 33.0, 31.0, 28.0, 25.0];
                let mut gpus: Vec<SimGpu> = (0u32..)
                    .zip(ambient_c)
                    .map(|(index, ambient)| rtx4090(index, ambient, load, start_ms))
                    .collect();
                if let Some(sandwiched) = gpus.get_mut(HOT_SLOT_GPU) {
                    sandwiched.airflow_share = HOT_SLOT_AIRFLOW_SHARE;
                }
                if let Some(narrow) = gpus.get_mut(NARROW_LINK_GPU) {
                    narrow.trained_link_width = Some(NARROW_LINK_WIDTH);
                }
                gpus
            }
            SimScenario::DatacenterFanless => vec![SimGpu::new(
                CardSpec::h100_sxm(),
                make_uuid(0x4100, 0),
                pci_bus_id(0x18),
                30.0,
                load,
                start_ms,
            )],
        };
        let mut machine = SimMachine {
            scenario,
            gpus,
            down: None,
        };
        machine.advance_to(now_ms);
        machine
    }

    /// The machine goes down for `why` (its supply tripped): every card is lost until a
    /// reboot (a new machine).
    pub fn go_down(&mut self, why: &str) {
        self.down.get_or_insert_with(|| why.to_string());
    }

    pub fn advance_to(&mut self, now_ms: u64) {
        for gpu in &mut self.gpus {
            gpu.advance_to(now_ms);
        }
    }
}

fn rtx4090(index: u32, ambient_c: f64, load: LoadPattern, start_ms: u64) -> SimGpu {
    let buses = [0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1];
    let bus = buses.get(index as usize).copied().unwrap_or(0x01);
    SimGpu::new(
        CardSpec::rtx4090(),
        make_uuid(0x4090, index),
        pci_bus_id(bus),
        ambient_c,
        load,
        start_ms,
    )
}

/// The model of the simulated card `uuid`, in any scenario (the simulator's and the fake
/// libnvidia-ml's cards alike); `None` for any other card, a real one included.
pub fn known_card(uuid: &str) -> Option<CardSpec> {
    let h100 = (make_uuid(0x4100, 0) == uuid).then(CardSpec::h100_sxm);
    h100.or_else(|| {
        (0..8)
            .any(|index| make_uuid(0x4090, index) == uuid)
            .then(CardSpec::rtx4090)
    })
}

/// A stable, realistic-looking NVML UUID for a simulated card.
fn make_uuid(model: u32, index: u32) -> String {
    let high = splitmix64(u64::from(model) << 32 | u64::from(index));
    let low = splitmix64(high);
    format!(
        "GPU-{:08x}-{:04x}-4{:03x}-9{:03x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xFFFF,
        high & 0xFFF,
        low >> 52,
        low & 0xFFFF_FFFF_FFFF
    )
}

fn pci_bus_id(bus: u32) -> String {
    format!("00000000:{bus:02X}:00.0")
}
