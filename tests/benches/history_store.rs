//! The daemon's history on disk: the cost of keeping one sample (one 40-byte write), of one
//! page a window reads when it opens (1,200 seconds read from the ring, sent as JSON and read
//! back), and the disk a GPU-day takes. Results are recorded in docs/benchmarks.md.
//!
//! Run: `cargo bench --bench history_store`.

use std::hint::black_box;
use std::os::unix::fs::MetadataExt;

use criterion::{Criterion, criterion_group, criterion_main};

use gputune_core::device::sim::{SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions, open_backend};
use gputune_core::telemetry::history::MetricRow;
use gputune_core::telemetry::store::{HistoryOptions, HistoryStore, PAGE_SECONDS};
use gputune_formats::card::Telemetry;
use gputune_formats::history::HistoryPage;
use gputune_formats::history::HistoryRow;

const DAY_S: u64 = 86_400;
const START_S: u64 = 1_790_000_000;

/// A real reading of the simulated 4090 (every field a card reports).
fn reading() -> Option<Telemetry> {
    let options = BackendOptions {
        choice: BackendChoice::Sim,
        nvml_library_path: None,
        sim: SimOptions {
            scenario: SimScenario::Rtx4090,
            ..SimOptions::default()
        },
    };
    let mut backend = open_backend(&options).ok()?.backend;
    backend.telemetry(0).ok()
}

fn store(dir: &std::path::Path) -> Option<HistoryStore> {
    HistoryStore::open(HistoryOptions {
        dir: dir.join("history"),
        keep_hours: 48,
    })
    .ok()
}

fn history_store(criterion: &mut Criterion) {
    let (Some(reading), Ok(dir)) = (reading(), tempfile::tempdir()) else {
        eprintln!("the simulator or a temporary folder is not available");
        return;
    };
    let Some(mut store) = store(dir.path()) else {
        eprintln!("the history folder could not be made");
        return;
    };
    let uuid = "GPU-bench-0";
    // A GPU-day at one sample a second, then what it takes on disk.
    let started = std::time::Instant::now();
    for second in 0..DAY_S {
        let row = HistoryRow::from_reading((START_S + second) * 1000 + 250, Some(&reading));
        store.record(uuid, &row);
    }
    let elapsed = started.elapsed();
    let ring = dir.path().join("history").join(format!("{uuid}.ring"));
    if let Ok(metadata) = std::fs::metadata(&ring) {
        eprintln!(
            "one GPU-day (86,400 samples) written in {:.2} s ({:.2} µs a sample); the file is {} bytes long, {} bytes on disk",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / DAY_S as f64,
            metadata.len(),
            metadata.blocks() * 512
        );
    }
    let now_ms = (START_S + DAY_S) * 1000;
    // Another GPU, so its laps never write over the day read below.
    let mut next_s = START_S;
    criterion.bench_function("history: keep one sample (one GPU)", |bench| {
        bench.iter(|| {
            let row = HistoryRow::from_reading(next_s * 1000, Some(&reading));
            next_s += 1;
            store.record("GPU-bench-1", black_box(&row));
        });
    });
    let page_from_ms = (START_S + DAY_S / 2) * 1000;
    let page_to_ms = page_from_ms + PAGE_SECONDS * 1000 - 1;
    if let Ok(page) = store.page(uuid, page_from_ms, page_to_ms, now_ms)
        && let Ok(text) = serde_json::to_string(&page)
    {
        eprintln!(
            "a page of {} rows is {} bytes of JSON",
            page.rows.len(),
            text.len()
        );
    }
    criterion.bench_function(
        "history: one 1,200 s page read, sent as JSON and read back",
        |bench| {
            bench.iter(|| {
                let page = store.page(uuid, page_from_ms, page_to_ms, now_ms);
                let text = page
                    .ok()
                    .and_then(|page| serde_json::to_string(&page).ok())
                    .unwrap_or_default();
                black_box(serde_json::from_str::<HistoryPage>(&text).ok())
            });
        },
    );
}

criterion_group!(benches, history_store);
criterion_main!(benches);
