//! GPU resources of a container, as upstream counts and strips them for the GPU memory service
//! (`dra.isGPUResourceName`, `ExtractGPUCountFromResourceRequirements`): the rule the GMS
//! ResourceClaimTemplate's device count, the pod renderer's removal of scalar GPUs and
//! validation share.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::DynamoComponentDeploymentSharedSpec;

/// Resource name of NVIDIA GPUs (the device plugin's).
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// Whether a resource name counts GPUs: `nvidia.com/gpu`, `gpu`, `*/gpu`, MIG shapes `*/mig-*`
/// and `gpu.*`, case-insensitively.
pub fn is_gpu_resource(name: &str) -> bool {
    let n = name.to_lowercase();
    n == NVIDIA_GPU
        || n == "gpu"
        || n.ends_with("/gpu")
        || n.contains("/mig-")
        || n.starts_with("gpu.")
}

/// The GPUs `resources` ask for: limits first, then requests; an error for several GPU resource
/// names or a quantity that is not a whole number.
pub fn gpu_count(resources: &ResourceRequirements) -> Result<i64, String> {
    let names: BTreeSet<&String> = [&resources.limits, &resources.requests]
        .into_iter()
        .flatten()
        .flat_map(BTreeMap::keys)
        .filter(|n| is_gpu_resource(n))
        .collect();
    if names.len() > 1 {
        return Err(format!(
            "multiple scalar GPU resource keys {names:?} are ambiguous; specify exactly one per container"
        ));
    }
    let Some(name) = names.into_iter().next() else {
        return Ok(0);
    };
    let quantity = resources
        .limits
        .as_ref()
        .and_then(|l| l.get(name))
        .or_else(|| resources.requests.as_ref().and_then(|r| r.get(name)))
        .map(|q| q.0.trim().to_string())
        .unwrap_or_default();
    quantity
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("GPU quantity {name}={quantity:?} is not a whole number"))
}

/// The GPUs of the component's `main` container ([`gpu_count`]; 0 without one).
pub fn main_container_gpus(component: &DynamoComponentDeploymentSharedSpec) -> Result<i64, String> {
    match component
        .main_container()
        .and_then(|c| c.resources.as_ref())
    {
        Some(resources) => gpu_count(resources),
        None => Ok(0),
    }
}

/// `resources` without any scalar GPU resource in limits or requests (an emptied list is
/// removed).
pub fn remove_gpu_resources(resources: &mut ResourceRequirements) {
    for list in [&mut resources.limits, &mut resources.requests] {
        if let Some(map) = list {
            map.retain(|name, _| !is_gpu_resource(name));
            if map.is_empty() {
                *list = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn limits(pairs: &[(&str, &str)]) -> ResourceRequirements {
        ResourceRequirements {
            limits: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn gpu_resource_names() {
        for yes in [
            "nvidia.com/gpu",
            "NVIDIA.COM/GPU",
            "gpu",
            "amd.com/gpu",
            "nvidia.com/mig-3g.20gb",
            "gpu.intel.com/xe",
        ] {
            assert!(is_gpu_resource(yes), "{yes}");
        }
        for no in ["cpu", "memory", "nvidia.com/gpumem", "ephemeral-storage"] {
            assert!(!is_gpu_resource(no), "{no}");
        }
    }

    /// Upstream `TestGetGPUCount` (failover_test.go) rows, plus the ambiguous and fractional
    /// cases the template reconciler refuses.
    #[test]
    fn gpu_counts() {
        assert_eq!(gpu_count(&ResourceRequirements::default()), Ok(0));
        assert_eq!(gpu_count(&limits(&[])), Ok(0));
        assert_eq!(gpu_count(&limits(&[("nvidia.com/gpu", "8")])), Ok(8));
        let requests = ResourceRequirements {
            requests: limits(&[("nvidia.com/gpu", "4")]).limits,
            ..Default::default()
        };
        assert_eq!(gpu_count(&requests), Ok(4));
        assert_eq!(
            gpu_count(&limits(&[("nvidia.com/mig-3g.20gb", "1")])),
            Ok(1)
        );
        assert_eq!(
            gpu_count(&limits(&[("nvidia.com/gpu", "4"), ("cpu", "2")])),
            Ok(4)
        );
        assert!(gpu_count(&limits(&[("nvidia.com/gpu", "1"), ("amd.com/gpu", "1")])).is_err());
        assert!(gpu_count(&limits(&[("nvidia.com/gpu", "500m")])).is_err());
    }

    /// Upstream `TestRemoveGPUFromLimits` (failover_test.go): GPU and MIG entries go from limits
    /// and requests, memory stays.
    #[test]
    fn gpu_resources_are_removed_from_limits_and_requests() {
        let mut r = limits(&[
            ("nvidia.com/gpu", "8"),
            ("nvidia.com/mig-3g.20gb", "1"),
            ("memory", "64Gi"),
        ]);
        r.requests = limits(&[("nvidia.com/gpu", "8"), ("nvidia.com/mig-3g.20gb", "1")]).limits;
        remove_gpu_resources(&mut r);
        let limits: Vec<&String> = r.limits.iter().flatten().map(|(k, _)| k).collect();
        assert_eq!(limits, ["memory"]);
        assert_eq!(r.requests, None, "an emptied list is removed");
    }
}
