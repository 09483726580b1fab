//! `gputune links` against the fake libnvidia-ml's 8-GPU box: the table and --json (GPU 5 at
//! x8 named, P2P off under the stock driver), P2P by a patched driver (FAKE_NVML_P2P=enabled),
//! and a card other programs compute on refused.

use common::FakeMachine;
use gputune_formats::card::ProcessKind;
use gputune_formats::reports::links::{
    CopyPath, LinkVerdict, LinksOutcome, LinksReport, PcieLink, Topology,
};

use crate::common;

#[test]
fn the_eight_card_box_as_json_names_the_card_at_x8_and_p2p_off() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let output = machine.gputune(&["links", "--json", "--size-mib", "1"]);
    let stderr = common::text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: LinksReport = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is the report ({error}): {}",
            common::text(&output.stdout)
        )
    });
    assert_eq!(report.outcome, LinksOutcome::AllRight);
    assert_eq!(report.gpus.len(), 8);
    assert_eq!(report.pairs.len(), 56);
    let narrow = &report.gpus[5];
    assert_eq!(narrow.verdict, LinkVerdict::Slow);
    assert_eq!(
        narrow.link_loaded,
        Some(PcieLink {
            generation: 4,
            width: 8
        })
    );
    assert!(
        report
            .gpus
            .iter()
            .filter(|card| card.gpu_index != 5)
            .all(|card| card.verdict == LinkVerdict::Good),
        "{report:?}"
    );
    let pair = &report.pairs[0];
    assert_eq!((pair.from_gpu, pair.to_gpu), (0, 1));
    assert_eq!(pair.topology, Some(Topology::SingleSwitch));
    assert_eq!(pair.p2p.map(|p2p| p2p.short()), Some("CNS/CNS".to_string()));
    assert_eq!(
        pair.copy.as_ref().map(|copy| copy.path),
        Some(CopyPath::ThroughHost)
    );
    let said = report.sentences.join("\n");
    assert!(
        said.contains("GPU 5 is at x8 (of x16): its all-reduce is about half as fast"),
        "{said}"
    );
    assert!(said.contains("P2P is off (CNS"), "{said}");
}

#[test]
fn a_patched_driver_shows_p2p_within_a_socket_in_the_table() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let output = machine
        .command(&["links", "--gpu", "0,1,4", "--size-mib", "1"])
        .env(nvidia_ml_fake::P2P_ENV, "enabled")
        .output()
        .unwrap_or_else(|error| panic!("gputune runs: {error}"));
    let stdout = common::text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        common::text(&output.stderr)
    );
    let line = |start: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("a line {start:?}: {stdout}"))
            .to_string()
    };
    assert!(line("GPU  Idle").contains("Host→device"), "{stdout}");
    let same_switch = line("0 → 1 ");
    assert!(
        same_switch.contains("PIX") && same_switch.contains("OK/OK"),
        "{same_switch}"
    );
    assert!(same_switch.contains("peer to peer"), "{same_switch}");
    let across = line("1 → 4 ");
    assert!(
        across.contains("SYS") && across.contains("TNS/TNS"),
        "{across}"
    );
    assert!(across.contains("through host"), "{across}");
    assert!(
        stdout.contains("P2P is on between the other cards; the 2 pairs across the CPU sockets go through the host"),
        "{stdout}"
    );
}

#[test]
fn a_card_other_programs_compute_on_is_refused_with_exit_status_2() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    // This test's own process: alive while gputune looks.
    let pid = std::process::id();
    machine.register_process(3, pid, ProcessKind::Compute, Some(2048));
    let output = machine.gputune(&["links", "--gpu", "2,3"]);
    let stderr = common::text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "GPU 3 is busy: other programs compute on it (pid {pid} ("
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--force. Nothing was tested."), "{stderr}");
    assert!(output.stdout.is_empty());
}
