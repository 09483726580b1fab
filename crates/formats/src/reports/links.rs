//! `gputune links --json`: every card's PCIe link (reached under load against its maximum) and
//! its host copies, every pair's topology, P2P status and device-to-device copy, each copy
//! checked bit for bit, and the sentences that say what it means for a data-parallel job.
//! The device layer's words for topology and P2P (`Topology`, `P2pStatus`) are here too.

use serde::{Deserialize, Serialize};

/// The links report's `format_version`.
pub const LINKS_REPORT_FORMAT: u32 = 1;

/// How two cards reach each other (NVML's common ancestor), nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// On one board (a dual-GPU card).
    Internal,
    /// Through one PCIe switch (nvidia-smi's PIX).
    SingleSwitch,
    /// Through several PCIe switches, not the host bridge (PXB).
    MultipleSwitches,
    /// Through the CPU's PCIe host bridge (PHB).
    HostBridge,
    /// Between host bridges of one NUMA node (NODE).
    NumaNode,
    /// Across CPU sockets (SYS: QPI/UPI or Infinity Fabric).
    System,
}

impl Topology {
    /// nvidia-smi topo -m's short name.
    pub fn short(self) -> &'static str {
        match self {
            Topology::Internal => "internal",
            Topology::SingleSwitch => "PIX",
            Topology::MultipleSwitches => "PXB",
            Topology::HostBridge => "PHB",
            Topology::NumaNode => "NODE",
            Topology::System => "SYS",
        }
    }

    /// "one PCIe switch", for sentences.
    pub fn describe(self) -> &'static str {
        match self {
            Topology::Internal => "the same board",
            Topology::SingleSwitch => "one PCIe switch",
            Topology::MultipleSwitches => "several PCIe switches",
            Topology::HostBridge => "the CPU's host bridge",
            Topology::NumaNode => "host bridges of one CPU",
            Topology::System => "the link between the CPU sockets",
        }
    }
}

/// Whether the driver lets one card read or write another's memory directly (NVML's P2P
/// status for one capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pStatus {
    Ok,
    /// What the stock driver says of GeForce cards (nvidia-smi's CNS).
    ChipsetNotSupported,
    GpuNotSupported,
    TopologyNotSupported,
    DisabledByRegkey,
    NotSupported,
    Unknown,
}

impl P2pStatus {
    /// nvidia-smi topo -p2p's short name.
    pub fn short(self) -> &'static str {
        match self {
            P2pStatus::Ok => "OK",
            P2pStatus::ChipsetNotSupported => "CNS",
            P2pStatus::GpuNotSupported => "GNS",
            P2pStatus::TopologyNotSupported => "TNS",
            P2pStatus::DisabledByRegkey => "off",
            P2pStatus::NotSupported => "NS",
            P2pStatus::Unknown => "?",
        }
    }
}

/// A pair's P2P status for reads and for writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pAccess {
    pub read: P2pStatus,
    pub write: P2pStatus,
}

impl P2pAccess {
    /// Copies may go card to card: the driver allows both reads and writes.
    pub fn enabled(self) -> bool {
        self.read == P2pStatus::Ok && self.write == P2pStatus::Ok
    }

    /// "OK/OK", "CNS/CNS".
    pub fn short(self) -> String {
        format!("{}/{}", self.read.short(), self.write.short())
    }
}

/// A PCIe link: generation and lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub generation: u32,
    pub width: u32,
}

impl PcieLink {
    /// What the link carries each way, GB/s (10⁹ bytes), before packet overheads: 2.5 and 5
    /// GT/s per lane with 8b/10b coding (Gen 1-2), 8, 16 and 32 GT/s with 128b/130b (Gen 3-5).
    pub fn raw_gb_per_s(self) -> f64 {
        let per_lane = match self.generation {
            0 => 0.0,
            1 => 0.25,
            2 => 0.5,
            generation => {
                let transfers = 8.0 * f64::from(1u32 << (generation.min(6) - 3));
                transfers * 128.0 / 130.0 / 8.0
            }
        };
        per_lane * f64::from(self.width)
    }

    /// "Gen 4 x16".
    pub fn describe(self) -> String {
        format!("Gen {} x{}", self.generation, self.width)
    }
}

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyPath {
    /// Host memory (pinned) to or from a card.
    Direct,
    /// Card to card, peer to peer.
    PeerToPeer,
    /// Card to card, staged through host memory (no P2P).
    ThroughHost,
}

/// One direction's copies, each checked bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyResult {
    pub path: CopyPath,
    /// Bytes of one copy.
    pub bytes: u64,
    pub copies: u32,
    /// All copies' bytes over their time, GB/s (10⁹ bytes).
    pub gb_per_s: f64,
    /// What the link should give this way, GB/s (see docs/box.md, "Links").
    pub expected_gb_per_s: Option<f64>,
    /// 64-bit words that arrived wrong, over all copies.
    pub wrong_words: u64,
    /// Where the first wrong word lies in its copy, bytes from the start.
    pub first_wrong_offset_bytes: Option<u64>,
}

/// A card's or a pair's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkVerdict {
    /// Every copy right, at the speed the link should give.
    Good,
    /// Every copy right, but slower than the link should give, or the link below its maximum.
    Slow,
    /// A copy returned wrong data.
    WrongData,
    /// Nothing could be measured (the reason is in `note`).
    NotTested,
}

impl LinkVerdict {
    pub fn word(self) -> &'static str {
        match self {
            LinkVerdict::Good => "good",
            LinkVerdict::Slow => "slow",
            LinkVerdict::WrongData => "WRONG DATA",
            LinkVerdict::NotTested => "not tested",
        }
    }
}

/// One card: its link and its host copies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardLinks {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    /// The link read before any copy (an idle card trains down, often to Gen 1).
    pub link_idle: Option<PcieLink>,
    /// The fastest link read while the copies ran.
    pub link_loaded: Option<PcieLink>,
    /// The most the card and its slot can train to.
    pub link_max: Option<PcieLink>,
    pub host_to_device: Option<CopyResult>,
    pub device_to_host: Option<CopyResult>,
    pub verdict: LinkVerdict,
    /// Why the verdict, in a few words ("at x8 of x16", "wrong data at byte 4096").
    pub note: String,
}

/// One ordered pair of cards: how they connect and a copy from one to the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairLinks {
    pub from_gpu: u32,
    pub to_gpu: u32,
    pub topology: Option<Topology>,
    pub p2p: Option<P2pAccess>,
    pub copy: Option<CopyResult>,
    pub verdict: LinkVerdict,
    pub note: String,
}

/// How the whole test came out (the CLI's exit status: 0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinksOutcome {
    /// Every copy right (some links may be slow: the sentences say which).
    AllRight,
    /// At least one copy returned wrong data.
    WrongData,
    /// Nothing, or not everything, could be measured.
    NotTested,
}

/// The whole of `links --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinksReport {
    pub format_version: u32,
    pub outcome: LinksOutcome,
    /// What ran the copies: "CUDA 12.6 driver", "simulated".
    pub runtime: String,
    pub size_bytes: u64,
    pub passes: u32,
    pub gpus: Vec<CardLinks>,
    pub pairs: Vec<PairLinks>,
    /// What it means for a data-parallel job, one finding a sentence.
    pub sentences: Vec<String>,
    pub ran_s: f64,
    /// Why the test stopped before its end (the window's Stop, Ctrl-C): the cards and pairs
    /// above are those tested by then. Absent when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_links_raw_rate_follows_its_generation_and_width() {
        let gen4_x16 = PcieLink {
            generation: 4,
            width: 16,
        };
        assert!((gen4_x16.raw_gb_per_s() - 31.51).abs() < 0.01);
        let gen4_x8 = PcieLink {
            generation: 4,
            width: 8,
        };
        assert!((gen4_x8.raw_gb_per_s() * 2.0 - gen4_x16.raw_gb_per_s()).abs() < 1e-9);
        let gen1_x16 = PcieLink {
            generation: 1,
            width: 16,
        };
        assert!((gen1_x16.raw_gb_per_s() - 4.0).abs() < 1e-9);
        let gen3_x16 = PcieLink {
            generation: 3,
            width: 16,
        };
        assert!((gen3_x16.raw_gb_per_s() - 15.75).abs() < 0.01);
        assert_eq!(gen4_x8.describe(), "Gen 4 x8");
    }

    #[test]
    fn p2p_is_enabled_only_when_reads_and_writes_are() {
        let stock = P2pAccess {
            read: P2pStatus::ChipsetNotSupported,
            write: P2pStatus::ChipsetNotSupported,
        };
        assert!(!stock.enabled());
        assert_eq!(stock.short(), "CNS/CNS");
        let half = P2pAccess {
            read: P2pStatus::Ok,
            write: P2pStatus::NotSupported,
        };
        assert!(!half.enabled());
        let patched = P2pAccess {
            read: P2pStatus::Ok,
            write: P2pStatus::Ok,
        };
        assert!(patched.enabled());
    }
}
