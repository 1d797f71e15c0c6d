//! Volumes the operator adds to a pod: `/dev/shm` and the topology labels of
//! KV-transfer-aware workers. Each replaces a user volume of the same name and a mount of the
//! same name or path.

use api::v1beta1::KvTransferPolicy;
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    ObjectFieldSelector, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::merge::merge_envs;
use crate::parts::env;

/// Name of the `/dev/shm` volume.
pub const SHARED_MEMORY_VOLUME: &str = "shared-memory";
/// Where the shared memory volume is mounted.
pub const SHARED_MEMORY_MOUNT_PATH: &str = "/dev/shm";
/// Size of `/dev/shm` when `sharedMemorySize` is unset.
pub const DEFAULT_SHARED_MEMORY_SIZE: &str = "8Gi";
/// Name of the topology label volume of KV-transfer-aware workers.
pub const TOPOLOGY_VOLUME: &str = "topology-labels";
/// Mount path of the topology label volume.
pub const TOPOLOGY_MOUNT_PATH: &str = "/etc/dynamo/topology";
/// Pod label prefix under which the topology controller exposes a domain.
pub const TOPOLOGY_LABEL_PREFIX: &str = "nvidia.com/dynamo-topology.";

/// Put `volume` into the pod (replacing one of its name) and mount it into `main` at `path`
/// (replacing a mount of the same name or path).
pub(crate) fn attach(spec: &mut PodSpec, main: &mut Container, volume: Volume, mount: VolumeMount) {
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != volume.name);
    volumes.push(volume);
    let mounts = main.volume_mounts.get_or_insert_with(Vec::new);
    mounts.retain(|m| m.name != mount.name && m.mount_path != mount.mount_path);
    mounts.push(mount);
}

/// The `/dev/shm` tmpfs: `sharedMemorySize` (default 8Gi), none when it is zero.
pub fn shared_memory(spec: &mut PodSpec, main: &mut Container, size: Option<&Quantity>) {
    let size = match size {
        Some(q) if quantity_is_zero(q) => return,
        Some(q) => q.clone(),
        None => Quantity(DEFAULT_SHARED_MEMORY_SIZE.into()),
    };
    let volume = Volume {
        name: SHARED_MEMORY_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(size),
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: SHARED_MEMORY_VOLUME.into(),
        mount_path: SHARED_MEMORY_MOUNT_PATH.into(),
        ..Default::default()
    };
    attach(spec, main, volume, mount);
}

/// Whether a quantity is zero (`0`, `0Gi`, `0.0`, ...).
pub fn quantity_is_zero(q: &Quantity) -> bool {
    let number: String =
        q.0.trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-'))
            .collect();
    number.parse::<f64>().is_ok_and(|n| n == 0.0)
}

/// Env, mount and Downward API volume of a KV-transfer-aware worker: the pod's topology labels
/// (`labelKey`, else one per ClusterTopology domain) as files under [`TOPOLOGY_MOUNT_PATH`].
pub fn topology_wiring(
    spec: &mut PodSpec,
    main: &mut Container,
    policy: &KvTransferPolicy,
    domains: &[String],
) {
    let enforcement = match policy.enforcement {
        Some(api::common::KvTransferEnforcement::Preferred) => "preferred",
        _ => "required",
    };
    let mut vars = vec![
        env("DYN_KV_TRANSFER_DOMAIN", &policy.domain),
        env("DYN_KV_TRANSFER_ENFORCEMENT", enforcement),
        env("DYN_TOPOLOGY_ENABLED", "true"),
        env("DYN_TOPOLOGY_MOUNT_PATH", TOPOLOGY_MOUNT_PATH),
    ];
    if let Some(weight) = policy.preferred_weight {
        vars.push(env("DYN_KV_TRANSFER_PREFERRED_WEIGHT", &weight.to_string()));
    }
    main.env = Some(merge_envs(main.env.take().unwrap_or_default(), vars));
    let item = |path: &str, label: &str| DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector {
            field_path: format!("metadata.labels['{label}']"),
            api_version: None,
        }),
        ..Default::default()
    };
    let items = match &policy.label_key {
        Some(key) => vec![item(&policy.domain, key)],
        None => domains
            .iter()
            .map(|d| item(d, &format!("{TOPOLOGY_LABEL_PREFIX}{d}")))
            .collect(),
    };
    let volume = Volume {
        name: TOPOLOGY_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(items),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: TOPOLOGY_VOLUME.into(),
        mount_path: TOPOLOGY_MOUNT_PATH.into(),
        read_only: Some(true),
        ..Default::default()
    };
    attach(spec, main, volume, mount);
}
