//! Child processes that cannot outlive the test binary.
//!
//! Test binaries exit without running destructors of statics, and may be killed outright. So the
//! control plane is not torn down by `Drop`: a small reaper process (`sh`) is started first and
//! reads a pipe from us. Every component's pid is written to it. When the pipe closes — normal
//! exit, panic, or SIGKILL of the test binary, the kernel closes it in every case — the reaper
//! terminates the components (SIGTERM, then SIGKILL after a grace period) and removes the run
//! directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use crate::Error;

const REAPER: &str = r#"
dir="$1"; pids=""
while read -r pid; do pids="$pids $pid"; done
for p in $pids; do kill -TERM "$p" 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
  alive=""
  for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1; i=$((i+1))
done
for p in $pids; do kill -KILL "$p" 2>/dev/null; done
[ -n "$dir" ] && rm -rf "$dir"
"#;

/// Owns the reaper; dropping it (or exiting) tears everything down.
pub struct Reaper {
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Option<Child>>,
}

impl Reaper {
    /// Starts a reaper that removes `dir` (if given) after the components are gone.
    pub fn start(dir: Option<&Path>) -> Result<Self, Error> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(REAPER)
            .arg("reaper")
            .arg(dir.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group: a Ctrl-C in the terminal reaches the test binary, whose exit
        // closes the pipe; the reaper itself must survive long enough to clean up.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| Error::spawn("sh (reaper)", e))?;
        let stdin = child.stdin.take();
        Ok(Self {
            stdin: Mutex::new(stdin),
            child: Mutex::new(Some(child)),
        })
    }

    /// Hands a process over to the reaper.
    pub fn adopt(&self, pid: u32) {
        if let Some(stdin) = self.stdin.lock().expect("reaper lock").as_mut() {
            let _ = writeln!(stdin, "{pid}");
            let _ = stdin.flush();
        }
    }

    /// Tears down now and waits for the reaper to finish.
    pub fn stop(&self) {
        drop(self.stdin.lock().expect("reaper lock").take());
        if let Some(mut child) = self.child.lock().expect("reaper lock").take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A started component: its log, and its exit status once it has exited.
#[derive(Clone)]
pub struct Component {
    pub name: String,
    pub pid: u32,
    pub log: PathBuf,
    exited: Arc<Mutex<Option<ExitStatus>>>,
    bin: PathBuf,
    args: Vec<String>,
}

impl Component {
    /// `Some` once the process has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exited.lock().expect("component lock")
    }
}

/// Starts `bin` with `args`, output to `<log_dir>/<name>.log`, in its own process group (so a
/// terminal's Ctrl-C does not kill it before the reaper does), adopted by `reaper`. A thread
/// waits for it, so an exited component never lingers as a zombie and its exit is observable.
pub fn spawn(
    reaper: &Reaper,
    name: &str,
    bin: &Path,
    args: &[String],
    log_dir: &Path,
) -> Result<Component, Error> {
    let log = log_dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).map_err(|e| Error::io(&log, e))?;
    start(reaper, name, bin, args, log, out)
}

impl Component {
    /// Starts the same command again (same flags, hence the same ports and data directory),
    /// appending to the same log; the process must have exited. Used to restart a component of
    /// an owned control plane ([`crate::ControlPlane::restart`]).
    pub(crate) fn respawn(&self, reaper: &Reaper) -> Result<Component, Error> {
        let out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
            .map_err(|e| Error::io(&self.log, e))?;
        start(
            reaper,
            &self.name,
            &self.bin,
            &self.args,
            self.log.clone(),
            out,
        )
    }
}

fn start(
    reaper: &Reaper,
    name: &str,
    bin: &Path,
    args: &[String],
    log: PathBuf,
    out: std::fs::File,
) -> Result<Component, Error> {
    let err = out.try_clone().map_err(|e| Error::io(&log, e))?;
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| Error::spawn(name, e))?;
    let pid = child.id();
    reaper.adopt(pid);
    let exited = Arc::new(Mutex::new(None));
    let slot = exited.clone();
    std::thread::Builder::new()
        .name(format!("wait-{name}"))
        .spawn(move || {
            if let Ok(status) = child.wait() {
                *slot.lock().expect("component lock") = Some(status);
            }
        })
        .map_err(|e| Error::spawn(name, e))?;
    Ok(Component {
        name: name.to_string(),
        pid,
        log,
        exited,
        bin: bin.to_path_buf(),
        args: args.to_vec(),
    })
}

/// A free TCP port on 127.0.0.1 (bound, then released; good enough on a test machine).
pub fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?;
    Ok(listener
        .local_addr()
        .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?
        .port())
}

/// The last `lines` lines of a log, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
