//! A real one-node Slurm cluster for a test, from Debian's `slurmctld`, `slurmd` and `munge`
//! (installed by `.ci/setup test`): munged with its own key and socket, slurmctld and slurmd on
//! free ports of 127.0.0.1, everything (state, spool, logs, pid files, the stand-in device
//! files gres.conf names) inside the test's folder. Process tracking needs no cgroup
//! (`proctrack/linuxproc`, `task/none`). Dropping it cancels its jobs and ends its daemons and
//! their slurmstepd processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::metrics::free_port;
use super::programs::installed;

/// The programs a cluster needs.
const PROGRAMS: [&str; 6] = [
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "sbatch",
    "scontrol",
];

pub struct Slurm {
    pub dir: PathBuf,
    pub conf: PathBuf,
    pids: Vec<u32>,
}

/// Why a cluster cannot start here, when it cannot: not root, or a program missing. On CI
/// (`CI` set) that is a failure, never a silent skip.
pub fn unavailable() -> Option<String> {
    let reason = if !nix::unistd::geteuid().is_root() {
        Some("Slurm's slurmd must run as root and this test is not root".to_string())
    } else {
        let missing: Vec<&str> = PROGRAMS
            .iter()
            .copied()
            .filter(|program| installed(program).is_none())
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "{} not installed (Debian: slurmctld slurmd slurm-client munge; `bash .ci/setup test` installs them)",
                missing.join(", ")
            )
        })
    };
    if let Some(reason) = &reason {
        assert!(
            std::env::var_os("CI").is_none(),
            "the real-Slurm test cannot run on CI: {reason}"
        );
    }
    reason
}

impl Slurm {
    /// A cluster in `dir` with GPUs `/dev/nvidia0..count` (character devices 195:N made
    /// there) and `plugstack` as its plugstack.conf line.
    pub fn start(dir: &Path, gpu_count: u32, plugstack: &str) -> Slurm {
        for sub in ["state", "spool", "log", "dev", "run"] {
            std::fs::create_dir_all(dir.join(sub)).expect("a cluster folder");
        }
        for minor in 0..gpu_count {
            let path = dir.join(format!("dev/nvidia{minor}"));
            nix::sys::stat::mknod(
                &path,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(195, u64::from(minor)),
            )
            .expect("a stand-in GPU device file");
        }
        let key = dir.join("munge.key");
        let bytes: Vec<u8> = (0..1024u32)
            .map(|at| (at.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&key, bytes).expect("a munge key");
        set_mode(&key, 0o600);
        let run = dir.join("run");
        run_ok(
            Command::new("munged")
                .arg("--force")
                .arg(format!("--socket={}", run.join("munge.sock").display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--pid-file={}", run.join("munged.pid").display()))
                .arg(format!(
                    "--log-file={}",
                    dir.join("log/munged.log").display()
                ))
                .arg(format!("--seed-file={}", run.join("munge.seed").display())),
        );
        let conf = dir.join("slurm.conf");
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=gputune-test\n\
                 SlurmctldHost=localhost(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={d}/run/munge.sock\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/run/slurmctld.pid\nSlurmdPidFile={d}/run/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 SchedulerType=sched/backfill\nMpiDefault=none\n\
                 SlurmdParameters=config_overrides\nReturnToService=2\n\
                 GresTypes=gpu\nPlugStackConfig={d}/plugstack.conf\n\
                 JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 KillWait=2\nMessageTimeout=5\nInactiveLimit=0\nMinJobAge=300\n\
                 NodeName=node1 NodeAddr=127.0.0.1 CPUs=8 Gres=gpu:{gpu_count} State=UNKNOWN\n\
                 PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                ctld = free_port(),
                slurmd = free_port(),
            ),
        )
        .expect("slurm.conf");
        std::fs::write(
            dir.join("gres.conf"),
            format!(
                "NodeName=node1 Name=gpu File={d}/dev/nvidia[0-{}]\n",
                gpu_count.saturating_sub(1)
            ),
        )
        .expect("gres.conf");
        std::fs::write(dir.join("plugstack.conf"), format!("{plugstack}\n"))
            .expect("plugstack.conf");
        let mut slurm = Slurm {
            dir: dir.to_path_buf(),
            conf,
            pids: Vec::new(),
        };
        slurm.pids.extend(read_pid(&run.join("munged.pid")));
        run_ok(
            slurm
                .command("slurmctld")
                .args(["-i", "-f"])
                .arg(&slurm.conf),
        );
        run_ok(
            slurm
                .command("slurmd")
                .args(["-N", "node1", "-f"])
                .arg(&slurm.conf),
        );
        slurm.pids.extend(read_pid(&run.join("slurmctld.pid")));
        slurm.pids.extend(read_pid(&run.join("slurmd.pid")));
        slurm.wait_for_idle_node();
        slurm
    }

    /// A Slurm program pointed at this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf).current_dir(&self.dir);
        command
    }

    pub fn output(&self, program: &str, arguments: &[&str]) -> Output {
        self.command(program)
            .args(arguments)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("{program} runs: {error}"))
    }

    /// `sbatch --parsable` with `arguments`: the job's id.
    pub fn sbatch(&self, arguments: &[&str]) -> String {
        let output = self.output("sbatch", &[&["--parsable"], arguments].concat());
        assert!(
            output.status.success(),
            "sbatch {arguments:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// A field of `scontrol show job` ("JobState" → "RUNNING"); a comment runs to the end of
    /// its line (it may hold spaces).
    pub fn job_field(&self, job: &str, field: &str) -> String {
        let output = self.output("scontrol", &["show", "job", job]);
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let key = format!("{field}=");
        text.lines()
            .find_map(|line| {
                let line = line.trim_start();
                let at = line
                    .find(&key)
                    .filter(|&at| at == 0 || line[..at].ends_with(' '))?;
                let value = &line[at + key.len()..];
                Some(if field.ends_with("Comment") {
                    value.trim_end().to_string()
                } else {
                    value
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .unwrap_or_default()
    }

    /// The pid of the slurmstepd running `job`'s step `step` ("batch", "0").
    pub fn slurmstepd_of(&self, job: &str, step: &str) -> Option<u32> {
        let wanted = format!("slurmstepd: [{job}.{step}]");
        super::process::command_lines()
            .into_iter()
            .find_map(|(pid, command)| (command == wanted).then_some(pid))
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default()
    }

    fn wait_for_idle_node(&self) {
        let started = Instant::now();
        loop {
            let output = self.output("sinfo", &["-h", "-o", "%t"]);
            if String::from_utf8_lossy(&output.stdout).trim() == "idle" {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the Slurm node never became idle; slurmd's log:\n{}\nslurmctld's log:\n{}",
                self.log("slurmd.log"),
                self.log("slurmctld.log")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = self.output("scancel", &["--full", "--user=root"]);
        std::thread::sleep(Duration::from_millis(300));
        // This cluster's slurmstepd processes (they outlive slurmd) are those started with
        // its slurm.conf in their environment.
        let conf = format!("SLURM_CONF={}", self.conf.display());
        for (pid, command) in super::process::command_lines() {
            if command.starts_with("slurmstepd") && environment_has(pid, &conf) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        for pid in &self.pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn run_ok(command: &mut Command) {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{command:?} runs: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn read_pid(path: &Path) -> Option<u32> {
    let started = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return Some(pid);
        }
        if started.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn environment_has(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|raw| {
            raw.split(|&byte| byte == 0)
                .any(|part| part == entry.as_bytes())
        })
        .unwrap_or(false)
}
