//! `frontendSidecar`: the named container of the pod template runs a Dynamo frontend beside
//! `main`. It keeps its name and place among the containers and gets the frontend's defaults
//! (command, args, `http` port, probes, env; its own name as `CONTAINER_NAME` in container
//! discovery mode) under its own values, as `main` does, and every volume mount of `main` it
//! does not have by name (the compilation cache and topology included; `/dev/shm` not). Its
//! runtime-gated defaults ([`crate::gates`]) follow its own image's tag, not the component's
//! version (`runtimeVersionOverride` and `main`'s image do not apply to it): a frontend image
//! whose tag is no version gets none.

use api::runtime_version::RuntimeVersion;
use api::v1beta1::ComponentType;
use k8s_openapi::api::core::v1::{PodSpec, VolumeMount};

use crate::{PodInput, defaults, merge};

/// Apply the frontend defaults to the container named `name` (validation guarantees it
/// exists; a missing one is left alone).
pub(crate) fn frontend(
    spec: &mut PodSpec,
    input: &PodInput<'_>,
    name: &str,
    main_mounts: &[VolumeMount],
) {
    let Some(user) = spec.containers.iter_mut().find(|c| c.name == name) else {
        return;
    };
    let version = user.image.as_deref().and_then(RuntimeVersion::from_image);
    let base = defaults(
        input,
        Some(ComponentType::Frontend),
        ComponentType::Frontend.as_str(),
        name,
        version,
    );
    let mut merged = merge::merge_container(base, Some(user));
    let mounts = merged.volume_mounts.get_or_insert_with(Vec::new);
    for mount in main_mounts {
        if !mounts.iter().any(|m| m.name == mount.name) {
            mounts.push(mount.clone());
        }
    }
    *user = merged;
}
