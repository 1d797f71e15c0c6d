//! The compilation cache: a user-created PVC (`compilationCache.pvcName`) mounted into `main`
//! at `compilationCache.mountPath`, else the backend's default, and the backend's cache env.
//!
//! | backend | default path | env |
//! | --- | --- | --- |
//! | vLLM | [`Backend::compilation_cache_path`] (`/root/.cache/vllm`) | `VLLM_CACHE_ROOT=<path>`, after every other env var (so it wins over a user value) |
//! | SGLang, TRT-LLM, unknown | none: `mountPath` is required (validation refuses the graph) | none |
//!
//! The volume is named after the PVC; a user volume of that name is kept when it is that
//! PVC, and the mount replaces a user mount of the same name or path.

use api::v1beta1::CompilationCacheConfig;
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimVolumeSource, PodSpec, Volume, VolumeMount,
};

use crate::Backend;
use crate::parts::env;
use crate::volumes::attach;

/// vLLM's cache root env var.
pub const VLLM_CACHE_ROOT: &str = "VLLM_CACHE_ROOT";

/// The mount path of `cache` for `backend`: the explicit one, else the backend's default.
pub fn mount_path(cache: &CompilationCacheConfig, backend: Backend) -> Option<String> {
    cache
        .mount_path
        .clone()
        .filter(|p| !p.is_empty())
        .or_else(|| backend.compilation_cache_path().map(str::to_string))
}

/// Mount the cache into `main` and set the backend's env (see the module docs). Without a path
/// (a graph validation refuses) nothing is mounted.
pub(crate) fn apply(
    spec: &mut PodSpec,
    main: &mut Container,
    cache: &CompilationCacheConfig,
    backend: Backend,
) {
    let Some(path) = mount_path(cache, backend) else {
        return;
    };
    let name = cache.pvc_name.clone();
    let volume = Volume {
        name: name.clone(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: name.clone(),
            read_only: None,
        }),
        ..Default::default()
    };
    attach(
        spec,
        main,
        volume,
        VolumeMount {
            name,
            mount_path: path.clone(),
            ..Default::default()
        },
    );
    if backend == Backend::Vllm {
        main.env
            .get_or_insert_with(Vec::new)
            .push(env(VLLM_CACHE_ROOT, &path));
    }
}
