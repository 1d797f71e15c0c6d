//! Where the control-plane binaries come from.
//!
//! In order:
//! 1. `KUBEBUILDER_ASSETS` (envtest's layout): a folder with at least `kube-apiserver` and
//!    `etcd`. `kube-controller-manager`, `kube-scheduler` and `kwok` are used when present there
//!    (envtest bundles do not ship them; without them there is no garbage collection and no
//!    Pods).
//! 2. `TESTKIT_BIN_DIR`: a folder produced by `xtask/controlplane/build.sh`.
//! 3. `xtask/controlplane/build.sh` itself, which prints its cache folder
//!    (`$HOME/.cache/dynamo-operator-rs/controlplane/<versions>`) and builds into it from the Go
//!    module proxy only when something is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The binaries one control plane runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub dir: PathBuf,
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: Option<PathBuf>,
    pub kube_scheduler: Option<PathBuf>,
    pub kwok: Option<PathBuf>,
    /// kwok's stage definitions (node initialisation, pod readiness, ...).
    pub kwok_stages: Option<PathBuf>,
}

impl Binaries {
    /// Whether Pods can be scheduled and become Ready (controller-manager, scheduler, kwok).
    pub fn simulates_nodes(&self) -> bool {
        self.kube_controller_manager.is_some()
            && self.kube_scheduler.is_some()
            && self.kwok.is_some()
            && self.kwok_stages.is_some()
    }

    /// Locates (or builds) the binaries; see the module docs for the order.
    pub fn locate() -> Result<Self, Error> {
        if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS") {
            return Self::from_dir(Path::new(&dir));
        }
        if let Some(dir) = std::env::var_os("TESTKIT_BIN_DIR") {
            return Self::from_dir(Path::new(&dir));
        }
        Self::from_dir(&build()?)
    }

    fn from_dir(dir: &Path) -> Result<Self, Error> {
        let required = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(Error::MissingBinary {
                    name: name.to_string(),
                    dir: dir.to_path_buf(),
                })
            }
        };
        let optional = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        Ok(Self {
            dir: dir.to_path_buf(),
            etcd: required("etcd")?,
            kube_apiserver: required("kube-apiserver")?,
            kube_controller_manager: optional("kube-controller-manager"),
            kube_scheduler: optional("kube-scheduler"),
            kwok: optional("kwok"),
            kwok_stages: optional("kwok-stages.yaml"),
        })
    }
}

/// The build script, found from this crate's source location.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/controlplane/build.sh")
}

/// Runs the build script (a no-op when its cache is complete) and returns the folder it printed.
pub fn build() -> Result<PathBuf, Error> {
    let script = build_script();
    let output = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::spawn("xtask/controlplane/build.sh", e))?;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "{} exited with {}",
            script.display(),
            output.status
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| Error::Build("build.sh printed no folder".into()))?;
    Ok(PathBuf::from(dir))
}
