//! The pod spec of a clique: the pod both pathways render ([`pod_render::pod_spec`]: the
//! operator's defaults for the component type under the user's pod template), plus what Grove
//! needs for multinode components, on each engine container (`main`, or `engine-0` and
//! `engine-1` with intra-pod failover):
//! - worker pods of multinode SGLang and vLLM components have no probes;
//! - a pod nothing names a ServiceAccount for (the user, the planner/EPP defaults, Kubernetes
//!   discovery) keeps none, as upstream renders it: the kubelet runs it as `default`, and the
//!   PodCliqueSet of a graph adopted from upstream stays byte-equal (writing `default` would
//!   change every clique template and so roll the pods);
//! - SGLang multinode pods get `--dist-init-addr <leader>:29500 --nnodes <n> --node-rank <r>`,
//!   the leader found through Grove's headless Service
//!   (`$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-<component>-ldr-0.$(GROVE_HEADLESS_SERVICE)`), the
//!   worker rank computed by the shell from `GROVE_PCLQ_POD_INDEX` (the command becomes
//!   `sh -c "exec <command> <args> <flags>"`).

use k8s_openapi::api::core::v1::{Container, PodSpec};
pub use pod_render::{
    Backend, DISABLE_IMAGE_PULL_SECRET_DISCOVERY, HTTP_PORT, PodInput, PullSecrets, SYSTEM_PORT,
    registry_host,
};

use crate::names::{ROLE_SUFFIX_LEADER, Role};

/// Port SGLang multinode ranks rendezvous on at the leader.
pub const SGLANG_DIST_INIT_PORT: i32 = 29500;

/// The pod spec of one clique of `role`: the component's pod, then the multinode wiring of its
/// engine containers (`main`, or both engines with intra-pod failover).
pub(crate) fn pod_spec(input: &PodInput<'_>, role: Role, backend: Backend) -> PodSpec {
    let mut spec = pod_render::pod_spec(input);
    let engines = pod_render::failover::engine_containers(input.component);
    for main in spec.containers.iter_mut().take(engines) {
        multinode(main, input, role, backend);
    }
    spec
}

/// Multinode adjustments of the merged main container (see the module docs).
fn multinode(main: &mut Container, input: &PodInput<'_>, role: Role, backend: Backend) {
    let nodes = input.component.number_of_nodes();
    if nodes <= 1 {
        return;
    }
    if role == Role::Worker && matches!(backend, Backend::Sglang | Backend::Vllm) {
        main.liveness_probe = None;
        main.readiness_probe = None;
        main.startup_probe = None;
    }
    if backend != Backend::Sglang {
        return;
    }
    let leader = format!(
        "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{}-{ROLE_SUFFIX_LEADER}-0.$(GROVE_HEADLESS_SERVICE)",
        input.component.name.to_lowercase()
    );
    let (rank, needs_shell) = match role {
        Role::Worker => ("$((GROVE_PCLQ_POD_INDEX + 1))", true),
        Role::Leader | Role::Main => ("0", false),
    };
    let flags = format!(
        "--dist-init-addr {leader}:{SGLANG_DIST_INIT_PORT} --nnodes {nodes} --node-rank {rank}"
    );
    let python = main
        .command
        .as_ref()
        .and_then(|c| c.first())
        .is_some_and(|c| is_python(c));
    if !python {
        // A shell command line (`sh -c "python3 -m ..."`) is left as the user wrote it.
        return;
    }
    if needs_shell {
        let command: Vec<String> = main
            .command
            .iter()
            .flatten()
            .chain(main.args.iter().flatten())
            .map(|t| shell_quote(t))
            .collect();
        main.command = Some(vec!["sh".into(), "-c".into()]);
        main.args = Some(vec![format!("exec {} {flags}", command.join(" "))]);
    } else {
        main.args
            .get_or_insert_with(Vec::new)
            .extend(flags.split_whitespace().map(str::to_string));
    }
}

/// `python`, `python3`, `python3.11`, optionally with a directory.
fn is_python(command: &str) -> bool {
    let base = command.rsplit('/').next().unwrap_or(command);
    let Some(version) = base.strip_prefix("python") else {
        return false;
    };
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    major.chars().all(|c| c.is_ascii_digit())
        && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// A token that survives `sh -c`: unchanged when simple, else double-quoted with `\`, `"`, `$`
/// and backquote escaped (upstream's quoting).
fn shell_quote(token: &str) -> String {
    const SPECIAL: &[char] = &[
        ' ', '\t', '\n', '\'', '"', '\\', '{', '}', '[', ']', '$', '`', '!',
    ];
    if !token.contains(SPECIAL) {
        return token.to_string();
    }
    let escaped = token
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('`', "\\`")
        .replace('\'', "'\"'\"'");
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_commands_and_quoting() {
        for yes in ["python", "python3", "python3.11", "/usr/bin/python3.8"] {
            assert!(is_python(yes), "{yes}");
        }
        for no in ["sh", "pythonx", "python3.", "ipython"] {
            assert!(!is_python(no), "{no}");
        }
        assert_eq!(shell_quote("--tp-size"), "--tp-size");
        assert_eq!(shell_quote(r#"{"a": "$b"}"#), r#""{\"a\": \"\$b\"}""#);
    }
}
