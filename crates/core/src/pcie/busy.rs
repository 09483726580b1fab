//! Cards other programs compute on: they share the card's bus, so the copies' rates would
//! measure both, and the test's buffers take memory they may need. Asked before anything is
//! copied, by every front end (the same words for the CLI and the window).

use crate::device::Backend;
use crate::stability::busy::{OtherWork, describe_processes};
use gputune_formats::card::{DeviceError, GpuProcess};

/// A card and the other programs computing on it.
#[derive(Debug, Clone, PartialEq)]
pub struct BusyCard {
    pub gpu: u32,
    pub processes: Vec<GpuProcess>,
}

impl BusyCard {
    /// "pid 4242 (alice) python train.py, 20480 MiB".
    pub fn who(&self) -> String {
        describe_processes(&self.processes.iter().collect::<Vec<_>>())
    }
}

/// The cards among `gpus` that other programs compute on (this process excluded).
pub fn busy_cards(backend: &mut dyn Backend, gpus: &[u32]) -> Result<Vec<BusyCard>, DeviceError> {
    let mut busy = Vec::new();
    for gpu in gpus {
        let work = OtherWork {
            processes: backend.processes(*gpu)?,
            force: false,
            force_hint: String::new(),
        };
        let processes: Vec<GpuProcess> = work.computing().into_iter().cloned().collect();
        if !processes.is_empty() {
            busy.push(BusyCard {
                gpu: *gpu,
                processes,
            });
        }
    }
    Ok(busy)
}

/// Why the test does not start on `card` (`force_hint`: how to go on anyway, e.g. ", or test
/// beside them with --force").
pub fn refusal(card: &BusyCard, force_hint: &str) -> String {
    format!(
        "GPU {} is busy: other programs compute on it ({}). The copy test beside them measures \
         the bus they share and takes memory they may need. Stop them first{force_hint}. \
         Nothing was tested.",
        card.gpu,
        card.who()
    )
}

/// What is said when the test runs beside them anyway.
pub fn warning(card: &BusyCard) -> String {
    format!(
        "GPU {} runs other programs ({}): its rates include their traffic.",
        card.gpu,
        card.who()
    )
}
