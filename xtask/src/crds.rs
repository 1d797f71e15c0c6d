//! `cargo xtask crds`: generated CRD YAML under deploy/crds/.

pub fn run(_check: bool) -> anyhow::Result<()> {
    anyhow::bail!("no CRDs are defined yet")
}
