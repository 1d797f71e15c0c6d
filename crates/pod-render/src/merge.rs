//! The user's layer over the operator's defaults.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar};
use serde_json::Value;

/// The user's container over the defaults `base` (named as `base` is): every field the user
/// sets wins (lists are replaced whole, objects merged), a user probe replaces the default
/// probe, and env vars are merged by name (user wins) and sorted by name.
pub fn merge_container(mut base: Container, user: Option<&Container>) -> Container {
    let Some(user) = user else {
        base.env = base.env.map(|e| merge_envs(e, Vec::new()));
        return base;
    };
    let base_env = base.env.take().unwrap_or_default();
    let fallback = base.clone();
    let mut target = serde_json::to_value(&base).unwrap_or(Value::Null);
    let mut patch = serde_json::to_value(user).unwrap_or(Value::Null);
    if let (Some(target), Some(patch)) = (target.as_object_mut(), patch.as_object_mut()) {
        patch.remove("name");
        patch.remove("env");
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if patch.get(probe).is_some_and(|p| !p.is_null()) {
                target.remove(probe);
            }
        }
    }
    merge(&mut target, &patch);
    let name = base.name.clone();
    let mut merged: Container = serde_json::from_value(target).unwrap_or(fallback);
    merged.name = name;
    let env = merge_envs(base_env, user.env.clone().unwrap_or_default());
    merged.env = (!env.is_empty()).then_some(env);
    merged
}

/// `common` and `specific` merged by name, `specific` winning, sorted by name (upstream's
/// `MergeEnvs`).
pub fn merge_envs(common: Vec<EnvVar>, specific: Vec<EnvVar>) -> Vec<EnvVar> {
    let mut by_name: BTreeMap<String, EnvVar> = BTreeMap::new();
    for e in common.into_iter().chain(specific) {
        by_name.insert(e.name.clone(), e);
    }
    by_name.into_values().collect()
}

/// Merge `patch` into `target`: objects recursively, anything else replaced. `null` and empty
/// lists in `patch` count as unset and leave `target` alone.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() || v.as_array().is_some_and(Vec::is_empty) {
                    continue;
                }
                match target.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        target.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}
