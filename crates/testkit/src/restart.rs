//! Restarting a component of an owned control plane, to test how clients live through an
//! apiserver or etcd restart; handing other processes to its reaper.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testkit::Error> {
//! let mut cp = testkit::ControlPlane::start(Default::default()).await?;
//! cp.restart("kube-apiserver", testkit::Stop::Graceful).await?; // back and ready on return
//! cp.restart("etcd", testkit::Stop::Kill).await?;
//! # Ok(()) }
//! ```
//!
//! The component is started again with the same flags (same ports, same data directory), its
//! output appended to the same log, and handed to the same reaper. [`ControlPlane::restart`]
//! returns once the apiserver answers `/readyz` again (for every component: after an etcd
//! restart the apiserver's readiness includes etcd).

use std::time::{Duration, Instant};

use crate::{ControlPlane, Error, process};

/// How a restarted component is stopped first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, then SIGKILL if it has not exited after 20 s.
    Graceful,
    /// SIGKILL at once (a crash).
    Kill,
}

impl ControlPlane {
    /// Hands a process the caller started (e.g. an operator under test) to the reaper, so it is
    /// ended with the control plane however the caller exits. Does nothing when attached.
    pub fn adopt(&self, pid: u32) {
        if let Some(reaper) = &self.reaper {
            reaper.adopt(pid);
        }
    }

    /// Stops the component `name` (as listed by [`ControlPlane::components`]), starts it again
    /// with the same command line and waits until the apiserver is ready. Only an owned control
    /// plane has components to restart. Returns how long the component was down.
    pub async fn restart(&mut self, name: &str, stop: Stop) -> Result<Duration, Error> {
        let refuse = |why: &str| Error::spawn(name, std::io::Error::other(why.to_string()));
        let reaper = self
            .reaper
            .as_ref()
            .ok_or_else(|| refuse("the control plane is attached, not owned"))?;
        let index = self
            .components
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| refuse("no such component"))?;
        let old = self.components[index].clone();
        let down = Instant::now();
        signal(&old, if stop == Stop::Kill { "-KILL" } else { "-TERM" });
        let deadline = Instant::now() + Duration::from_secs(20);
        while old.exit_status().is_none() {
            if Instant::now() > deadline {
                signal(&old, "-KILL");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let new = old.respawn(reaper)?;
        self.components[index] = new.clone();
        let client = self.client();
        let apiserver = self
            .components
            .iter()
            .find(|c| c.name == "kube-apiserver")
            .cloned()
            .unwrap_or(new);
        crate::wait_until(
            &apiserver,
            &format!("kube-apiserver ready after restarting {name}"),
            Duration::from_secs(90),
            || async {
                client
                    .request_text(
                        http::Request::get("/readyz")
                            .body(Vec::new())
                            .expect("request"),
                    )
                    .await
                    .is_ok()
            },
        )
        .await?;
        Ok(down.elapsed())
    }
}

fn signal(component: &process::Component, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &component.pid.to_string()])
        .status();
}
