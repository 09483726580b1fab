//! The link test (`gputune links`, the window's Box view): every card's PCIe link reached
//! under load against its maximum, the topology and P2P status between cards (NVML), and a
//! copy test — host→device and device→host per card from pinned memory, card to card for every
//! ordered pair (peer to peer where the driver allows it, else through the host) — with every
//! copy checked bit for bit. One engine for every front end: [`test_links`] takes the cards
//! and a progress callback and returns the report; nothing here prints or draws. It writes
//! nothing to any card's settings (docs/box.md, "Links").
//!
//! busy.rs: cards other programs compute on, refused before anything is copied;
//! bench.rs: what runs the copies ([`CopyBench`]) and the pattern they carry; cuda.rs: the
//! real copies (the stability check's CUDA device); simulated.rs: the simulator's;
//! deadline.rs: every call with a deadline, so a stuck copy cannot hang the test; expect.rs:
//! what a link should give; run.rs: the test; sentences.rs: what it means for a DDP job.

mod bench;
pub mod busy;
pub mod cuda;
mod deadline;
mod expect;
mod run;
mod sentences;
pub mod simulated;

pub use bench::{CopyBench, CopyChecked, Route, check_words, fill_words, open_bench};
pub use deadline::{COPY_DEADLINE, DeadlineBench};
pub use expect::{PRACTICAL_SHARE, SLOW_BELOW, host_gb_per_s, pair_gb_per_s};
pub use run::{LinksOptions, LinksProgress, run_links, test_links, test_links_opening};
