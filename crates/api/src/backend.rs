//! Which inference backend a worker runs: the main container's command line
//! (`python… -m dynamo.<backend>`), else the graph's `backendFramework` (upstream's
//! detection).

use crate::v1beta1::ComponentType;
use crate::{BackendFramework, DynamoComponentDeploymentSharedSpec};

/// vLLM's default compilation cache path.
pub const VLLM_COMPILATION_CACHE_PATH: &str = "/root/.cache/vllm"; // path inside the container

/// The inference backend of a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SGLang.
    Sglang,
    /// vLLM.
    Vllm,
    /// TensorRT-LLM.
    Trtllm,
    /// Not a worker, or nothing to detect.
    None,
}

impl Backend {
    /// The backend of `component` in a graph whose `backendFramework` is `explicit`. Errors when
    /// the command line names a backend different from `explicit`, or more than one.
    pub fn detect(
        component: &DynamoComponentDeploymentSharedSpec,
        explicit: Option<BackendFramework>,
    ) -> Result<Backend, String> {
        if !component.r#type.is_some_and(ComponentType::is_worker) {
            return Ok(Backend::None);
        }
        let line: Vec<String> = component
            .main_container()
            .map(|m| {
                m.command
                    .iter()
                    .flatten()
                    .chain(m.args.iter().flatten())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let detected: Vec<Backend> = [
            (Backend::Vllm, "vllm"),
            (Backend::Sglang, "sglang"),
            (Backend::Trtllm, "trtllm"),
        ]
        .into_iter()
        .filter(|(_, module)| runs_module(&line, &format!("dynamo.{module}")))
        .map(|(b, _)| b)
        .collect();
        let explicit = explicit.map(Backend::from);
        match (detected.as_slice(), explicit) {
            ([one], Some(e)) if *one != e => Err(format!(
                "backend framework mismatch: the command runs {one:?} but backendFramework is {e:?}"
            )),
            ([one], _) => Ok(*one),
            ([], Some(e)) => Ok(e),
            ([], None) => Ok(Backend::None),
            (many, _) => Err(format!(
                "multiple backend frameworks detected from the command: {many:?}"
            )),
        }
    }

    /// Where the backend keeps its compilation cache unless `compilationCache.mountPath` says
    /// otherwise: vLLM's default; no other backend has one.
    pub fn compilation_cache_path(self) -> Option<&'static str> {
        (self == Backend::Vllm).then_some(VLLM_COMPILATION_CACHE_PATH)
    }

    /// The framework this backend is, if it is one.
    pub fn framework(self) -> Option<BackendFramework> {
        match self {
            Backend::Sglang => Some(BackendFramework::Sglang),
            Backend::Vllm => Some(BackendFramework::Vllm),
            Backend::Trtllm => Some(BackendFramework::Trtllm),
            Backend::None => None,
        }
    }
}

impl From<BackendFramework> for Backend {
    fn from(framework: BackendFramework) -> Backend {
        match framework {
            BackendFramework::Sglang => Backend::Sglang,
            BackendFramework::Vllm => Backend::Vllm,
            BackendFramework::Trtllm => Backend::Trtllm,
        }
    }
}

/// Whether the command line runs `python… [...] -m [...] <module>[...]` (no shell operator in
/// between), upstream's detection pattern.
pub fn runs_module(line: &[String], module: &str) -> bool {
    let joined = line.join(" ");
    let words: Vec<&str> = joined.split_whitespace().collect();
    words.iter().enumerate().any(|(i, w)| {
        let is_python = w
            .rsplit('/')
            .next()
            .is_some_and(|base| base.starts_with("python"));
        if !is_python {
            return false;
        }
        let rest = &words[i + 1..];
        let segment: Vec<&&str> = rest
            .iter()
            .take_while(|w| !w.contains('|') && !w.contains('&') && !w.contains(';'))
            .collect();
        segment
            .iter()
            .position(|w| **w == "-m")
            .is_some_and(|m| segment[m + 1..].iter().any(|w| w.contains(module)))
    })
}
