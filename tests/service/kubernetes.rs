//! deploy/kubernetes/ without a cluster: every manifest parses and the kustomization names it;
//! the DaemonSet's mounts are its volumes, its ConfigMaps are generated, its ServiceAccount is
//! the one RBAC binds; the ServiceMonitor selects the Service and its port, the Service the
//! pods; the ConfigMap's profiles are gputune profiles; the init container's script chooses by
//! the node's label; and the DaemonSet's own arguments and environment, with its mounts moved
//! to temporary folders, run the real daemon on the fake libnvidia-ml.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::FakeMachine;
use common::metrics::{Exporter, by_gpu};
use yaml_rust2::{Yaml, YamlLoader};

use crate::common;

fn base() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

fn load(file: &Path) -> Vec<Yaml> {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
    YamlLoader::load_from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
}

fn text(yaml: &Yaml) -> &str {
    yaml.as_str().unwrap_or_default()
}

fn list(yaml: &Yaml) -> &[Yaml] {
    yaml.as_vec().map_or(&[], Vec::as_slice)
}

/// A YAML mapping of strings (labels, a selector).
fn strings(yaml: &Yaml) -> BTreeMap<String, String> {
    yaml.as_hash()
        .into_iter()
        .flatten()
        .map(|(key, value)| (text(key).to_string(), text(value).to_string()))
        .collect()
}

fn is_subset(part: &BTreeMap<String, String>, whole: &BTreeMap<String, String>) -> bool {
    !part.is_empty()
        && part
            .iter()
            .all(|(key, value)| whole.get(key) == Some(value))
}

fn kustomization() -> Yaml {
    load(&base().join("kustomization.yaml")).remove(0)
}

/// Every resource the kustomization lists, each document once.
fn resources() -> Vec<Yaml> {
    let kustomization = kustomization();
    list(&kustomization["resources"])
        .iter()
        .flat_map(|file| load(&base().join(text(file))))
        .collect()
}

fn resource(kind: &str) -> Yaml {
    let mut found: Vec<Yaml> = resources()
        .into_iter()
        .filter(|document| text(&document["kind"]) == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found.remove(0)
}

/// The files of the kustomization's ConfigMap generator `name`.
fn generated_files(name: &str) -> Vec<PathBuf> {
    let kustomization = kustomization();
    let generator = list(&kustomization["configMapGenerator"])
        .iter()
        .find(|generator| text(&generator["name"]) == name)
        .unwrap_or_else(|| panic!("a ConfigMap generator {name}"));
    list(&generator["files"])
        .iter()
        .map(|file| base().join(text(file)))
        .collect()
}

#[test]
fn every_manifest_parses_and_the_kustomization_names_each() {
    let kustomization = kustomization();
    let namespace = text(&kustomization["namespace"]);
    assert_eq!(namespace, "gputune-system");
    let listed: Vec<&str> = list(&kustomization["resources"]).iter().map(text).collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(base())
        .expect("deploy/kubernetes is there")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    on_disk.sort();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, on_disk,
        "every manifest is a resource of the kustomization"
    );
    let kinds: Vec<String> = resources()
        .iter()
        .map(|document| {
            assert!(!text(&document["apiVersion"]).is_empty(), "{document:?}");
            assert!(
                !text(&document["metadata"]["name"]).is_empty(),
                "{document:?}"
            );
            let kind = text(&document["kind"]).to_string();
            let cluster_wide = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
            if !cluster_wide.contains(&kind.as_str()) {
                assert_eq!(
                    text(&document["metadata"]["namespace"]),
                    namespace,
                    "{kind}"
                );
            }
            kind
        })
        .collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Service",
        "ServiceMonitor",
    ] {
        assert!(
            kinds.iter().any(|found| found == kind),
            "{kind} in {kinds:?}"
        );
    }
    for file in generated_files("gputune-profiles")
        .into_iter()
        .chain(generated_files("gputune-scripts"))
    {
        assert!(file.is_file(), "{}", file.display());
    }
}

#[test]
fn the_daemonsets_mounts_are_its_volumes_and_it_runs_where_the_gpus_are() {
    let daemon_set = resource("DaemonSet");
    let pod = &daemon_set["spec"]["template"];
    let spec = &pod["spec"];
    let volumes: BTreeMap<&str, &Yaml> = list(&spec["volumes"])
        .iter()
        .map(|volume| (text(&volume["name"]), volume))
        .collect();
    let containers: Vec<&Yaml> = list(&spec["initContainers"])
        .iter()
        .chain(list(&spec["containers"]))
        .collect();
    assert_eq!(containers.len(), 2);
    let mut mounted = Vec::new();
    for container in &containers {
        for mount in list(&container["volumeMounts"]) {
            let name = text(&mount["name"]);
            assert!(
                volumes.contains_key(name),
                "{name} is mounted but not declared"
            );
            mounted.push(name);
        }
    }
    for name in volumes.keys() {
        assert!(
            mounted.contains(name),
            "{name} is declared but never mounted"
        );
    }
    // The ConfigMaps it mounts are the ones the kustomization generates.
    for volume in volumes.values() {
        let config_map = text(&volume["configMap"]["name"]);
        if !config_map.is_empty() {
            assert!(!generated_files(config_map).is_empty(), "{config_map}");
        }
    }
    let selector = strings(&daemon_set["spec"]["selector"]["matchLabels"]);
    assert!(is_subset(&selector, &strings(&pod["metadata"]["labels"])));
    // On every GPU node, tolerated there, privileged, with the image of this version.
    assert_eq!(
        strings(&spec["nodeSelector"]).get("nvidia.com/gpu.present"),
        Some(&"true".to_string())
    );
    assert!(
        list(&spec["tolerations"])
            .iter()
            .any(|toleration| text(&toleration["key"]) == "nvidia.com/gpu")
    );
    let daemon = &list(&spec["containers"])[0];
    assert_eq!(
        daemon["securityContext"]["privileged"].as_bool(),
        Some(true)
    );
    for container in &containers {
        assert_eq!(
            text(&container["image"]),
            format!("gputune:{}", env!("CARGO_PKG_VERSION"))
        );
    }
    // Its ServiceAccount is the one the RBAC binding gives `get nodes`.
    let account = text(&spec["serviceAccountName"]);
    assert_eq!(
        text(&resource("ServiceAccount")["metadata"]["name"]),
        account
    );
    let binding = resource("ClusterRoleBinding");
    let subject = &list(&binding["subjects"])[0];
    assert_eq!(text(&subject["name"]), account);
    assert_eq!(text(&subject["namespace"]), "gputune-system");
    let role = resource("ClusterRole");
    assert_eq!(
        text(&binding["roleRef"]["name"]),
        text(&role["metadata"]["name"])
    );
    let rule = &list(&role["rules"])[0];
    assert_eq!(
        list(&rule["resources"])
            .iter()
            .map(text)
            .collect::<Vec<_>>(),
        ["nodes"]
    );
    assert_eq!(
        list(&rule["verbs"]).iter().map(text).collect::<Vec<_>>(),
        ["get"]
    );
}

#[test]
fn the_service_monitor_selects_the_service_and_its_port_and_the_service_the_pods() {
    let service = resource("Service");
    let monitor = resource("ServiceMonitor");
    let daemon_set = resource("DaemonSet");
    let service_labels = strings(&service["metadata"]["labels"]);
    assert!(is_subset(
        &strings(&monitor["spec"]["selector"]["matchLabels"]),
        &service_labels
    ));
    let service_namespace = text(&service["metadata"]["namespace"]);
    assert!(
        list(&monitor["spec"]["namespaceSelector"]["matchNames"])
            .iter()
            .any(|name| text(name) == service_namespace)
    );
    let port_names: Vec<&str> = list(&service["spec"]["ports"])
        .iter()
        .map(|port| text(&port["name"]))
        .collect();
    let endpoints = list(&monitor["spec"]["endpoints"]);
    assert!(!endpoints.is_empty());
    for endpoint in endpoints {
        assert!(
            port_names.contains(&text(&endpoint["port"])),
            "{endpoint:?}"
        );
        assert_eq!(text(&endpoint["path"]), "/metrics");
    }
    let pod = &daemon_set["spec"]["template"];
    assert!(is_subset(
        &strings(&service["spec"]["selector"]),
        &strings(&pod["metadata"]["labels"])
    ));
    // The Service's target port is the daemon's metrics port, on the port it listens on.
    let container_ports = list(&list(&pod["spec"]["containers"])[0]["ports"]);
    for port in list(&service["spec"]["ports"]) {
        let target = text(&port["targetPort"]);
        let container_port = container_ports
            .iter()
            .find(|candidate| text(&candidate["name"]) == target)
            .unwrap_or_else(|| panic!("no container port {target}"));
        assert_eq!(container_port["containerPort"], port["port"]);
        let listen = format!(":{}", container_port["containerPort"].as_i64().unwrap_or(0));
        assert!(daemon_arguments().contains(&listen), "{listen}");
    }
}

#[test]
fn the_configmaps_profiles_are_gputune_profiles_named_as_their_label() {
    let files = generated_files("gputune-profiles");
    assert!(files.len() >= 2);
    for file in files {
        let bytes = std::fs::read(&file).expect("the profile reads");
        let profile = gputune_core::profiles::toml_text::parse_profile(&bytes)
            .unwrap_or_else(|problem| panic!("{}", problem.at(&file)));
        let stem = file
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or("");
        assert_eq!(profile.name, stem, "the label value is the file's name");
        // A label value: at most 63 characters, alphanumerics and -_. inside.
        assert!(
            stem.len() <= 63
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        );
        assert!(profile.power_limit.is_some(), "{stem}");
    }
}

/// The daemon container's arguments, as the DaemonSet gives them.
fn daemon_arguments() -> Vec<String> {
    let daemon_set = resource("DaemonSet");
    let container = &list(&daemon_set["spec"]["template"]["spec"]["containers"])[0];
    list(&container["args"])
        .iter()
        .map(|arg| text(arg).to_string())
        .collect()
}

/// `path` with its mount (the longest `mount_path` it is under) moved to `moved[mount_path]`.
fn moved_path(path: &str, moved: &BTreeMap<String, PathBuf>) -> Option<String> {
    moved
        .iter()
        .filter(|(mount, _)| path == mount.as_str() || path.starts_with(&format!("{mount}/")))
        .max_by_key(|(mount, _)| mount.len())
        .map(|(mount, to)| format!("{}{}", to.display(), &path[mount.len()..]))
}

#[test]
fn the_daemonsets_arguments_and_environment_run_the_real_daemon_on_its_mounts() {
    // Each profile of the ConfigMap, as the init container would have chosen it.
    for profile_file in generated_files("gputune-profiles") {
        run_the_daemonset_daemon(&profile_file);
    }
}

fn run_the_daemonset_daemon(profile_file: &Path) {
    let bytes = std::fs::read(profile_file).expect("the profile reads");
    let profile = gputune_core::profiles::toml_text::parse_profile(&bytes)
        .unwrap_or_else(|problem| panic!("{}", problem.at(profile_file)));
    let percent = profile
        .power_limit
        .map_or(100.0, |limit| limit.percent_of_default);
    let machine = FakeMachine::new("8x-rtx4090", "");
    let scratch = machine.state_dir().with_file_name("node");
    let daemon_set = resource("DaemonSet");
    let container = &list(&daemon_set["spec"]["template"]["spec"]["containers"])[0];
    // Each of the daemon's mounts becomes a temporary folder, filled as the node fills it:
    // the host's driver library (the fake one), an empty GPU Operator driver folder, and the
    // profile the init container chose.
    let mut moved = BTreeMap::new();
    for mount in list(&container["volumeMounts"]) {
        let name = text(&mount["name"]);
        let folder = scratch.join(name);
        std::fs::create_dir_all(&folder).expect("a folder");
        moved.insert(text(&mount["mountPath"]).to_string(), folder.clone());
        match name {
            "host-driver-libraries" => {
                std::os::unix::fs::symlink(&machine.library, folder.join("libnvidia-ml.so.1"))
                    .expect("the fake library is linked");
            }
            "node-profile" => {
                std::fs::copy(profile_file, folder.join("boot-profile.toml")).expect("copied");
            }
            _ => {}
        }
    }
    // Every path the daemon is given is on one of its mounts, and is moved with it.
    let mut arguments = Vec::new();
    for argument in daemon_arguments() {
        let argument = match argument.as_str() {
            // The pod's own address, every one of them: here, this machine's loopback.
            ":9400" => "127.0.0.1:0".to_string(),
            path if path.starts_with('/') => moved_path(path, &moved)
                .unwrap_or_else(|| panic!("{path} is on none of the daemon's mounts")),
            other => other.to_string(),
        };
        arguments.push(argument);
    }
    let mut command = machine.command(&[]);
    command.args(&arguments).arg("--driver-wait-s").arg("0");
    for variable in list(&container["env"]) {
        let value = text(&variable["value"])
            .split(':')
            .map(|path| {
                if path.starts_with('/') {
                    moved_path(path, &moved)
                        .unwrap_or_else(|| panic!("{path} is on none of the daemon's mounts"))
                } else {
                    path.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(":");
        command.env(text(&variable["name"]), value);
    }
    let runtime = moved.get("/run/gputune").expect("/run/gputune is mounted");
    command.env("GPUTUNE_SOCKET", runtime.join("gputune.sock"));
    let metrics = Exporter::start(command, "serving metrics on http://");
    // The library came through GPUTUNE_NVML_LIB's list, and the node's profile is every
    // card's boot default: its share of the cards' 450 W, and its fan curve kept.
    let watts = 450.0 * percent / 100.0;
    let samples = metrics.scrape_until("every GPU at the node profile", |samples| {
        let limits = by_gpu(samples, "gputune_power_limit_watts");
        limits.len() == 8 && limits.values().all(|sample| sample.value == watts)
    });
    let curves = by_gpu(&samples, "gputune_fan_curve_active");
    assert_eq!(curves.len(), 8);
    let expected_curve = if profile.fan_curve.is_some() {
        1.0
    } else {
        0.0
    };
    assert!(
        curves.values().all(|sample| sample.value == expected_curve),
        "{}: {curves:?}",
        profile.name
    );
    assert!(by_gpu(&samples, "DCGM_FI_DEV_GPU_TEMP").len() == 8);
    assert!(runtime.join("gputune.sock").exists());
    let state = moved
        .get("/var/lib/gputune")
        .expect("/var/lib/gputune is mounted");
    assert!(state.join("defaults").is_dir());
}

/// Runs the init container's script against a stand-in API server (a `curl` that answers
/// the node's JSON), with its folders moved to `scratch`.
fn choose_profile(scratch: &Path, labels: &str) -> (std::process::Output, Vec<u8>) {
    assert!(
        Command::new("jq").arg("--version").output().is_ok(),
        "jq is not installed: run `bash .ci/setup test` (Debian's jq, which the image has too)"
    );
    let bin = scratch.join("bin");
    let account = scratch.join("account");
    let profiles = scratch.join("profiles");
    for folder in [&bin, &account, &profiles] {
        std::fs::create_dir_all(folder).expect("a folder");
    }
    std::fs::write(account.join("token"), "secret-token").expect("written");
    std::fs::write(account.join("ca.crt"), "a certificate").expect("written");
    for file in generated_files("gputune-profiles") {
        let name = file.file_name().expect("a file name");
        std::fs::copy(&file, profiles.join(name)).expect("copied");
    }
    // The stand-in answers only the node's own URL, with the pod's token.
    let curl = bin.join("curl");
    std::fs::write(
        &curl,
        "#!/bin/sh\ncase \"$*\" in *'Authorization: Bearer secret-token'*'https://api.test:6443/api/v1/nodes/gpu-7') printf '%s' \"$NODE_JSON\" ;; *) echo \"curl: (22) 403 for $*\" >&2; exit 22 ;; esac\n",
    )
    .expect("written");
    std::fs::set_permissions(&curl, std::fs::Permissions::from_mode(0o755)).expect("executable");
    let chosen = scratch.join("boot-profile.toml");
    let _ = std::fs::remove_file(&chosen);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("sh")
        .arg(base().join("choose-profile.sh"))
        .env("PATH", path)
        .env("NODE_NAME", "gpu-7")
        .env(
            "NODE_JSON",
            format!("{{\"metadata\":{{\"name\":\"gpu-7\",\"labels\":{labels}}}}}"),
        )
        .env("GPUTUNE_PROFILES_DIR", &profiles)
        .env("GPUTUNE_CHOSEN_PROFILE", &chosen)
        .env("GPUTUNE_SERVICE_ACCOUNT_DIR", &account)
        .env("GPUTUNE_KUBERNETES_API", "https://api.test:6443")
        .output()
        .expect("sh runs");
    let written = std::fs::read(&chosen).unwrap_or_else(|_| b"(none)".to_vec());
    (output, written)
}

#[test]
fn the_init_container_chooses_the_profile_its_nodes_label_names() {
    let scratch = tempfile::tempdir().expect("a temporary folder");
    let (output, written) = choose_profile(
        scratch.path(),
        "{\"nvidia.com/gpu.present\":\"true\",\"gputune.io/profile\":\"quiet-70\"}",
    );
    assert!(output.status.success(), "{output:?}");
    let quiet = std::fs::read(base().join("profiles/quiet-70.toml")).expect("there");
    assert_eq!(written, quiet);
    assert!(common::text(&output.stdout).contains("with the profile quiet-70"));

    // No label: an empty file, which the daemon reads as no profile.
    let (output, written) = choose_profile(scratch.path(), "{\"nvidia.com/gpu.present\":\"true\"}");
    assert!(output.status.success(), "{output:?}");
    assert!(written.is_empty(), "{}", String::from_utf8_lossy(&written));

    // A label naming no profile: the pod stops with the sentence, and nothing is written.
    let (output, written) = choose_profile(scratch.path(), "{\"gputune.io/profile\":\"turbo\"}");
    assert!(!output.status.success());
    let said = common::text(&output.stderr);
    assert!(
        said.contains("gputune.io/profile=turbo names no profile")
            && said.contains("efficient-80 quiet-70"),
        "{said}"
    );
    assert_eq!(written, b"(none)");
}
