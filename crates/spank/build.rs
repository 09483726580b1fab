//! Slurm loads a plugin only when its `plugin_version` is the running Slurm's release
//! (major.minor), so the number comes from the installed Slurm's own header,
//! `slurm/slurm_version.h` (Debian: libslurm-dev), or from `SLURM_VERSION_H` naming that file.
//! Nothing else of Slurm is needed to build: the SPANK functions the plugin calls are resolved
//! when slurmstepd, srun or sbatch load it.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_VERSION_H");
    let header = std::env::var_os("SLURM_VERSION_H")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include/slurm/slurm_version.h"));
    println!("cargo:rerun-if-changed={}", header.display());
    let text = match std::fs::read_to_string(&header) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "gputune-spank: cannot read Slurm's {} ({error}). The plugin must carry the \
                 version of the Slurm it runs in: install Slurm's headers (Debian: `apt-get \
                 install libslurm-dev`, which `bash .ci/setup test` does) or set \
                 SLURM_VERSION_H to that file.",
                header.display()
            );
            std::process::exit(1);
        }
    };
    let number = text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define SLURM_VERSION_NUMBER")?;
        let hex = rest.trim().strip_prefix("0x")?;
        u32::from_str_radix(hex.trim(), 16).ok()
    });
    match number {
        Some(number) => {
            let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
            let code = format!(
                "/// The Slurm release this plugin was built for (`SLURM_VERSION_NUMBER`).\n\
                 pub const SLURM_VERSION_NUMBER: u32 = {number:#x};\n"
            );
            if let Err(error) = std::fs::write(out.join("slurm_version.rs"), code) {
                eprintln!("gputune-spank: cannot write into OUT_DIR ({error}).");
                std::process::exit(1);
            }
        }
        None => {
            eprintln!(
                "gputune-spank: {} has no `#define SLURM_VERSION_NUMBER 0x…` line.",
                header.display()
            );
            std::process::exit(1);
        }
    }
}
