//! The processes on a GPU: one line in the overview's card (how many, and the one holding the
//! most VRAM) and a table in the graphs view (pid, user, command, VRAM, type). The process a
//! `gputune run` or a sweep started is marked "job".

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::GpuModel;
use gputune_core::device::process::top_process;
use gputune_formats::card::GpuProcess;
use gputune_formats::units::{NOT_AVAILABLE, gib, mib, mib_text, or_na};

/// What marks the job's process.
const JOB_COLOUR: Color32 = Color32::from_rgb(0x8a, 0xc4, 0xff);
/// The most processes the hover text of a card lists.
const MAX_LISTED_ON_HOVER: usize = 12;
/// Rows of the table shown before it scrolls.
const TABLE_ROWS_SHOWN: f32 = 6.0;

/// The process a session holding controls of `gpu` started as its job, when its client said.
pub fn job_pid(gpu: &GpuModel) -> Option<u32> {
    gpu.tuning
        .iter()
        .flat_map(|tuning| &tuning.holders)
        .find_map(|holder| holder.job_pid)
}

/// The card's line: "2 · alice · 20.9 GiB · python train.py …" (the process with the most
/// VRAM), "none", or "n/a" when the GPU does not list them.
pub fn summary_text(processes: Option<&[GpuProcess]>, job_pid: Option<u32>) -> String {
    let Some(processes) = processes else {
        return NOT_AVAILABLE.to_string();
    };
    let Some(top) = top_process(processes) else {
        return "none".to_string();
    };
    let mut parts = vec![processes.len().to_string()];
    if top.belongs_to_job(job_pid) {
        parts.push("job".to_string());
    }
    parts.push(top.user_text().to_string());
    if let Some(bytes) = top.used_memory_bytes {
        parts.push(gib(bytes));
    }
    parts.push(short_command(top.command_text()));
    parts.join(" · ")
}

/// A command line with its program named without its folder ("/usr/bin/python3 -u train.py"
/// reads "python3 -u train.py"): the card has room for a few words only.
fn short_command(command: &str) -> String {
    let (program, arguments) = command.split_once(' ').unwrap_or((command, ""));
    let program = program
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or(program);
    if arguments.is_empty() {
        program.to_string()
    } else {
        format!("{program} {arguments}")
    }
}

/// One line per process, for hover texts: "4242  alice  20480 MiB  C  python train.py".
fn process_line(process: &GpuProcess, job_pid: Option<u32>) -> String {
    format!(
        "{}{}  {}  {}  {}  {}",
        process.pid,
        if process.belongs_to_job(job_pid) {
            " (job)"
        } else {
            ""
        },
        process.user_text(),
        vram_mib_text(process),
        process.kind.short(),
        process.command_text()
    )
}

fn vram_mib_text(process: &GpuProcess) -> String {
    or_na(process.used_memory_bytes, mib_text)
}

/// The card's "Processes" value: the summary, cut to the card's width, every process on hover.
pub fn card_summary(ui: &mut egui::Ui, processes: Option<&[GpuProcess]>, job_pid: Option<u32>) {
    let label = ui.add(egui::Label::new(summary_text(processes, job_pid)).truncate());
    if let Some(processes) = processes.filter(|processes| !processes.is_empty()) {
        let mut lines: Vec<String> = processes
            .iter()
            .take(MAX_LISTED_ON_HOVER)
            .map(|process| process_line(process, job_pid))
            .collect();
        if processes.len() > MAX_LISTED_ON_HOVER {
            lines.push(format!(
                "… and {} more (open the graphs)",
                processes.len() - MAX_LISTED_ON_HOVER
            ));
        }
        label.on_hover_text(lines.join("\n"));
    }
}

/// Widths of the table's columns other than the command, in points.
const PID_WIDTH: f32 = 96.0;
const USER_WIDTH: f32 = 110.0;
const VRAM_WIDTH: f32 = 90.0;
const KIND_WIDTH: f32 = 130.0;
const COMMAND_MIN_WIDTH: f32 = 160.0;

/// The graphs view's table of the GPU's processes, most VRAM first.
pub fn processes_table(ui: &mut egui::Ui, processes: Option<&[GpuProcess]>, job_pid: Option<u32>) {
    let Some(processes) = processes else {
        ui.label(RichText::new("Processes: n/a — this GPU does not list them.").weak());
        return;
    };
    let title = format!("Processes ({})", processes.len());
    egui::CollapsingHeader::new(RichText::new(title).strong())
        .id_salt("processes")
        .default_open(true)
        .show(ui, |ui| {
            if processes.is_empty() {
                ui.label(RichText::new("No process uses this GPU.").weak());
                return;
            }
            let spacing = ui.spacing().item_spacing.x;
            let command_width = (ui.available_width()
                - PID_WIDTH
                - USER_WIDTH
                - VRAM_WIDTH
                - KIND_WIDTH
                - 4.0 * spacing)
                .max(COMMAND_MIN_WIDTH);
            let row_height = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
            header_row(ui, command_width);
            egui::ScrollArea::vertical()
                .id_salt("processes-rows")
                .max_height(row_height * TABLE_ROWS_SHOWN)
                .auto_shrink([false, true])
                .show_rows(ui, row_height, processes.len(), |ui, rows| {
                    for process in &processes[rows] {
                        process_row(ui, process, job_pid, command_width);
                    }
                });
        });
}

fn header_row(ui: &mut egui::Ui, command_width: f32) {
    ui.horizontal(|ui| {
        for (title, width) in [
            ("PID", PID_WIDTH),
            ("User", USER_WIDTH),
            ("Command", command_width),
            ("VRAM (MiB)", VRAM_WIDTH),
            ("Type", KIND_WIDTH),
        ] {
            cell(ui, width, |ui| {
                ui.label(RichText::new(title).weak());
            });
        }
    });
}

fn process_row(ui: &mut egui::Ui, process: &GpuProcess, job_pid: Option<u32>, command_width: f32) {
    ui.horizontal(|ui| {
        cell(ui, PID_WIDTH, |ui| {
            ui.label(process.pid.to_string());
            if process.belongs_to_job(job_pid) {
                ui.label(RichText::new("job").strong().color(JOB_COLOUR))
                    .on_hover_text("The command gputune run or the sweep started");
            }
        });
        cell(ui, USER_WIDTH, |ui| {
            ui.add(egui::Label::new(process.user_text()).truncate());
        });
        cell(ui, command_width, |ui| {
            let command = ui.add(egui::Label::new(process.command_text()).truncate());
            if process.exited {
                command.on_hover_text("The process ended after the driver listed it.");
            }
        });
        cell(ui, VRAM_WIDTH, |ui| {
            ui.label(or_na(process.used_memory_bytes, |bytes| {
                mib(bytes).to_string()
            }));
        });
        cell(ui, KIND_WIDTH, |ui| {
            ui.label(process.kind.describe());
        });
    });
}

/// A column of `width` points, its content left to right and cut to fit.
fn cell(ui: &mut egui::Ui, width: f32, content: impl FnOnce(&mut egui::Ui)) {
    let height = ui.spacing().interact_size.y;
    ui.allocate_ui_with_layout(
        egui::vec2(width, height),
        egui::Layout::left_to_right(egui::Align::Center),
        |ui| {
            ui.set_width(width);
            content(ui);
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::card::ProcessKind;

    fn process(pid: u32, mib: u64, command: Option<&str>) -> GpuProcess {
        GpuProcess {
            pid,
            kind: ProcessKind::Compute,
            used_memory_bytes: Some(mib << 20),
            user: Some("alice".to_string()),
            command: command.map(str::to_string),
            exited: command.is_none(),
            ancestor_pids: Vec::new(),
        }
    }

    #[test]
    fn the_summary_names_the_count_and_the_top_process() {
        let processes = [
            process(7, 21_000, Some("python train.py")),
            process(8, 10, None),
        ];
        assert_eq!(
            summary_text(Some(&processes), None),
            "2 · alice · 20.5 GiB · python train.py"
        );
        assert_eq!(
            summary_text(Some(&processes), Some(7)),
            "2 · job · alice · 20.5 GiB · python train.py"
        );
        assert_eq!(summary_text(Some(&[]), None), "none");
        let worker = process(9, 1024, Some("/usr/bin/python3 -u train.py"));
        assert_eq!(
            summary_text(Some(&[worker]), None),
            "1 · alice · 1.0 GiB · python3 -u train.py"
        );
        assert_eq!(short_command("/opt/game"), "game");
        assert_eq!(short_command("(exited)"), "(exited)");
        assert_eq!(summary_text(None, None), "n/a");
        assert_eq!(
            process_line(&processes[1], Some(8)),
            "8 (job)  alice  10 MiB  C  (exited)"
        );
    }

    #[test]
    fn a_worker_the_job_started_is_marked_as_the_job() {
        // The job (a launcher, 100) uses no GPU itself; its worker does.
        let mut worker = process(300, 20_000, Some("python train.py"));
        worker.ancestor_pids = vec![200, 100];
        assert_eq!(
            summary_text(Some(std::slice::from_ref(&worker)), Some(100)),
            "1 · job · alice · 19.5 GiB · python train.py"
        );
        assert_eq!(
            process_line(&worker, Some(100)),
            "300 (job)  alice  20000 MiB  C  python train.py"
        );
        assert_eq!(
            process_line(&worker, Some(7)),
            "300  alice  20000 MiB  C  python train.py"
        );
    }
}
