//! Security scenarios: `deploy/` is least privilege and locked down (static checks, reused from
//! the operator's tests), every rule of the ClusterRole is needed (the operator run with each
//! rule removed in turn breaks), and no Secret's data reaches a log, an event or a status.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::harness::{
    self, OPERATOR_NAMESPACE, OperatorSpec, account_user, apply, audit_mark, audit_since, graph,
    scan_text,
};
use super::{Report, Suite};

/// The static checks of `deploy/` are the operator's `deploy` tests (no wildcard, Secrets by
/// name only, the Helm chart equal to `deploy/`, the pod locked down: non-root, read-only root
/// filesystem, no privilege escalation, all capabilities dropped, seccomp RuntimeDefault); this
/// runs them and adds what they do not cover: the metrics endpoint can be bound to loopback.
pub fn deploy_static(root: &Path) -> anyhow::Result<Report> {
    let mut report = Report::new("deploy-static");
    // The workspace's feature set, so the test build is reused.
    let status = bench::cluster::cargo()
        .args(["test", "-q", "--workspace", "--test", "deploy"])
        .current_dir(root)
        .status()?;
    report.figure(
        "cargo test -p operator --test deploy",
        if status.success() { "passed" } else { "FAILED" },
    );
    if !status.success() {
        report.fail("deploy/ static checks failed (wildcards, Secrets, pod security context)");
    }
    let role: ClusterRole = serde_yaml::from_str(&std::fs::read_to_string(
        root.join("deploy/rbac/clusterrole.yaml"),
    )?)?;
    let rules = role.rules.unwrap_or_default();
    report.figure("ClusterRole rules", rules.len());
    let secrets: Vec<String> = rules
        .iter()
        .filter(|r| r.resources.iter().flatten().any(|x| x == "secrets"))
        .map(|r| {
            format!(
                "{} (resourceNames: {})",
                r.verbs.join(","),
                r.resource_names
                    .as_ref()
                    .map_or("any".to_string(), |n| n.join(","))
            )
        })
        .collect();
    report.figure("Secrets access", secrets.join("; "));
    let deployment = std::fs::read_to_string(root.join("deploy/operator/deployment.yaml"))?;
    let metrics = deployment
        .lines()
        .find(|l| l.contains("--metrics-address"))
        .map(|l| l.trim().trim_start_matches("- ").to_string())
        .unwrap_or_else(|| "(default 0.0.0.0:8080)".into());
    report.figure("deploy/ metrics address", metrics);
    Ok(report)
}

/// Every Secret value the run put in place or the operator created, looked for in every
/// operator log, every Event and every status the operator wrote; and the metrics endpoint
/// listens on loopback only when told so.
pub async fn secrets(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("secrets");
    suite.env.remember_operator_secrets().await?;
    let admin = suite.env.admin();
    // The Events and statuses were scanned after every scenario; the logs are scanned here, for
    // every secret known by the end.
    let mut haystacks: Vec<(String, String)> = Vec::new();
    for log in &suite.env.logs {
        haystacks.push((
            log.display().to_string(),
            std::fs::read_to_string(log).unwrap_or_default(),
        ));
    }
    haystacks.push(("events".into(), harness::events_text(&admin).await?));
    haystacks.push(("statuses".into(), harness::statuses_text(&admin).await?));
    let bytes: usize = haystacks.iter().map(|(_, t)| t.len()).sum();
    report.figure("secret values looked for", suite.env.secrets.len());
    report.figure(
        "operator logs scanned",
        format!(
            "{} logs, {:.1} MB",
            suite.env.logs.len(),
            bytes as f64 / 1e6
        ),
    );
    report.figure(
        "Events and statuses scanned after the scenarios",
        format!("{:.1} MB", suite.scanned_bytes as f64 / 1e6),
    );
    let mut leaks = 0;
    for (what, text) in &haystacks {
        let (_, found) = scan_text(text, &suite.env.secrets);
        for f in found {
            leaks += 1;
            report.fail(format!("secret value {f} found in {what}"));
        }
    }
    suite.totals.secret_leaks += leaks;
    report.figure(
        "secret values found (all scenarios)",
        suite.totals.secret_leaks,
    );

    // The metrics endpoint as every scenario ran it: bound to loopback, nothing else listens.
    if let Some(operator) = suite.main.as_ref() {
        let port: u16 = operator
            .metrics
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let listeners = listening_addresses(port);
        report.figure("metrics endpoint listens on", listeners.join(", "));
        if listeners.iter().any(|a| !a.starts_with("127.0.0.1")) {
            report.fail("--metrics-address=127.0.0.1:… listens beyond loopback");
        }
    }
    Ok(report)
}

/// Local addresses listening on `port` (from /proc/net/tcp and tcp6).
fn listening_addresses(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 4 || cols[3] != "0A" {
                continue;
            }
            let Some((addr, p)) = cols[1].split_once(':') else {
                continue;
            };
            if u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            let ip = if v6 {
                format!("[{addr}]")
            } else {
                let n = u32::from_str_radix(addr, 16).unwrap_or(0);
                std::net::Ipv4Addr::from(n.swap_bytes()).to_string()
            };
            out.push(format!("{ip}:{port}"));
        }
    }
    out
}

/// The inputs that make the operator use every permission: a graph with a frontend, planner,
/// EPP and a multinode decode worker with the GPU memory service and a checkpoint; the same
/// graph on the grove pathway when Grove's CRDs are installed; a standalone checkpoint.
fn ablation_inputs(suite: &Suite, ns: &str) -> anyhow::Result<Vec<Value>> {
    let container = |image: &str| {
        json!({"name": "main", "image": image,
               "envFrom": [{"secretRef": {"name": harness::TOKEN_SECRET}}]})
    };
    let component = |name: &str, t: &str| {
        json!({"name": name, "type": t, "replicas": 1,
               "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}}})
    };
    let mut decode = component("VllmDecodeWorker", "decode");
    decode["multinode"] = json!({"nodeCount": 2});
    decode["podTemplate"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "1"}});
    decode["experimental"] = json!({
        "gpuMemoryService": {},
        "checkpoint": {"enabled": true},
    });
    let everything = json!({
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": "everything", "namespace": ns},
        "spec": {"backendFramework": "vllm", "components": [
            component("Frontend", "frontend"),
            component("Planner", "planner"),
            component("Epp", "epp"),
            decode,
        ]}
    });
    let mut inputs = vec![everything.clone()];
    if suite.env.features.grove {
        let mut grove = everything.clone();
        grove["metadata"] = json!({"name": "everything-grove", "namespace": ns,
                                   "annotations": {"nvidia.com/enable-grove": "true"}});
        inputs.push(grove);
    }
    // PVCs are a v1alpha1 field (`spec.pvcs`, create: true).
    inputs.push(json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": "with-pvc", "namespace": ns},
        "spec": {
            "pvcs": [{"name": "model-cache", "create": true, "size": "1Gi",
                      "volumeAccessMode": "ReadWriteOnce", "storageClass": "standard"}],
            "services": {"Frontend": {"componentType": "frontend", "replicas": 1,
                "extraPodSpec": {"mainContainer": {"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1"}}}}
        }
    }));
    if suite.env.features.checkpoints {
        let mut c = harness::yaml_value(
            &suite
                .env
                .root
                .join(crate::CORPUS)
                .join("checkpoints/qwen.yaml"),
        )?;
        c["metadata"] = json!({"name": "qwen", "namespace": ns});
        inputs.push(c);
    }
    let templates = suite.templates();
    for (name, body) in &templates {
        inputs.push(graph(name, body, ns, name));
    }
    Ok(inputs)
}

/// The operator run with each rule of `deploy/rbac/clusterrole.yaml` removed in turn (as its
/// own ServiceAccount, bound to a copy of the ClusterRole without that rule): a rule is needed
/// when the apiserver refuses the operator something (403 in the audit log) that the full role
/// allows. First the full role: no request refused.
pub async fn rbac_ablation(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("rbac-ablation");
    // The main operator is stopped: one operator at a time owns the graphs and the CRD's
    // conversion webhook.
    if let Some(mut main) = suite.main.take() {
        main.terminate();
    }
    let admin = suite.env.admin();
    let root = suite.env.root.clone();
    let role: ClusterRole = serde_yaml::from_str(&std::fs::read_to_string(
        root.join("deploy/rbac/clusterrole.yaml"),
    )?)?;
    let rules = role.rules.clone().unwrap_or_default();
    let account = "dynamo-operator-ablation";
    let pp = PatchParams::apply("reliability").force();
    bind_account(&admin, account, &pp).await?;

    let mut table =
        String::from("| rule | verbs | removed: first request refused |\n| --- | --- | --- |\n");
    let mut unexercised = Vec::new();
    for index in order(rules.len()) {
        let without: Vec<PolicyRule> = rules
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, r)| r.clone())
            .collect();
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": account},
            "rules": without,
        }))?;
        Api::<ClusterRole>::all(admin.clone())
            .patch(account, &pp, &Patch::Apply(&role))
            .await?;
        let refused = run_ablated(suite, account, index == rules.len()).await?;
        if index == rules.len() {
            report.figure(
                "full role: requests refused",
                refused.as_ref().map_or("none".into(), |r| r.clone()),
            );
            if let Some(r) = refused {
                report.fail(format!(
                    "the deployed ClusterRole is not enough: {r} was refused"
                ));
            }
            continue;
        }
        suite.totals.rbac_rules_checked += 1;
        let rule = &rules[index];
        let label = rule_label(rule);
        table.push_str(&format!(
            "| {label} | {} | {} |\n",
            rule.verbs.join(","),
            refused
                .clone()
                .unwrap_or_else(|| "**nothing broke**".into())
        ));
        println!(
            "    rule {index} {label}: {}",
            refused.clone().unwrap_or_else(|| "nothing broke".into())
        );
        if refused.is_none() {
            unexercised.push(label);
        }
    }
    report.figure("rules checked", rules.len());
    report.figure("rules whose removal broke nothing", unexercised.len());
    if !unexercised.is_empty() {
        report.flag(format!(
            "not exercised by the scenario inputs (dead weight or untested): {}",
            unexercised.join("; ")
        ));
    }
    report.details.push(table);
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(account, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(account, &DeleteParams::default())
        .await;
    suite.main_operator().await?;
    suite.main_leading().await?;
    Ok(report)
}

/// The operator's own ServiceAccount for the ablation, bound to the ClusterRole of the same
/// name (whose rules each run sets).
async fn bind_account(admin: &Client, account: &str, pp: &PatchParams) -> anyhow::Result<()> {
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": account, "namespace": OPERATOR_NAMESPACE}
    }))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), OPERATOR_NAMESPACE)
        .patch(account, pp, &Patch::Apply(&sa))
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": OPERATOR_NAMESPACE}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(account, pp, &Patch::Apply(&binding))
        .await?;
    Ok(())
}

/// The rule indices to remove in turn, after index `rules` (the full role, the baseline).
/// RELIABILITY_RULES=3,7 limits the run to those rule indices (to look at one closely).
fn order(rules: usize) -> Vec<usize> {
    let mut order: Vec<usize> = vec![rules];
    let only: Option<Vec<usize>> = std::env::var("RELIABILITY_RULES")
        .ok()
        .map(|v| v.split(',').filter_map(|i| i.trim().parse().ok()).collect());
    order.extend((0..rules).filter(|i| only.as_ref().is_none_or(|o| o.contains(i))));
    order
}

/// `groups resources (names)` of a rule, for the table.
fn rule_label(rule: &PolicyRule) -> String {
    format!(
        "{}{}{}",
        rule.api_groups
            .iter()
            .flatten()
            .map(|g| if g.is_empty() { "core" } else { g.as_str() })
            .collect::<Vec<_>>()
            .join(","),
        rule.resources
            .iter()
            .flatten()
            .map(|r| format!(" {r}"))
            .collect::<String>(),
        rule.resource_names
            .as_ref()
            .map_or(String::new(), |n| format!(" ({})", n.join(","))),
    )
}

/// One run of the operator as `account` on fresh inputs: the first request the apiserver
/// refused it (403), or `None` when everything settled without a refusal.
async fn run_ablated(
    suite: &mut Suite,
    account: &str,
    baseline: bool,
) -> anyhow::Result<Option<String>> {
    let admin = suite.env.admin();
    // The webhook CA Secret is created by whoever finds it missing: remove it, so its creation
    // is exercised too.
    let _ = Api::<Secret>::namespaced(admin.clone(), OPERATOR_NAMESPACE)
        .delete("dynamo-operator-webhook-ca", &DeleteParams::default())
        .await;
    let ns = suite.env.namespace("rbac").await?;
    let mark = audit_mark(&suite.env.cp);
    let lease = format!("ablation-{}", suite.env.rng.next() % 1_000_000);
    let mut operator = suite
        .env
        .operator(OperatorSpec {
            account: account.into(),
            lease,
            ..OperatorSpec::new("dynamo-operator-ablation")
        })
        .await?;
    let skipped = apply_inputs(suite, &ns).await?;
    if baseline && !skipped.is_empty() {
        anyhow::bail!("inputs refused with the full role: {skipped:?}");
    }
    let user = account_user(account);
    let started = Instant::now();
    let limit = Duration::from_secs(if baseline { 90 } else { 45 });
    let mut refused = None;
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let entries = audit_since(&suite.env.cp, mark).await;
        // Refused by RBAC (not, say, by a namespace of an earlier run being terminated).
        let by_rbac = |e: &&harness::Entry| {
            e.user == user
                && e.code == 403
                && !e.message.contains("because it is being terminated")
                && (e.namespace.is_empty()
                    || e.namespace == ns
                    || e.namespace == OPERATOR_NAMESPACE)
        };
        if let Some(e) = entries.iter().find(by_rbac) {
            refused = Some(refusal(e));
            break;
        }
        if operator.unexpected_exit().is_some() {
            // It could not even start (e.g. no Lease access): its log says why.
            let log = operator.log_text();
            refused = Some(format!(
                "the operator exited: {}",
                log.lines()
                    .rev()
                    .find(|l| l.contains("ERROR"))
                    .unwrap_or("see its log")
                    .chars()
                    .take(160)
                    .collect::<String>()
            ));
            break;
        }
        // Settled: every graph decided, and no write for 5 s.
        let last_write = entries
            .iter()
            .filter(|e| e.user == user && e.is_write() && e.resource != "leases")
            .map(|e| e.at)
            .max()
            .unwrap_or(0);
        let decided = harness::graphs(&admin, &ns)
            .await
            .map(|l| l.iter().all(|d| harness::ready_condition(d).is_some()))
            .unwrap_or(false);
        if decided
            && harness::now_micros() - last_write > 5_000_000
            && started.elapsed() > Duration::from_secs(15)
        {
            break;
        }
    }
    operator.kill();
    harness::delete_namespace(&admin, &ns).await;
    Ok(refused)
}

/// Applies the ablation inputs in `ns`. The v1alpha1 input needs this operator's conversion
/// webhook: each input is retried for 20 s until it is accepted (never, when the rule to
/// configure the webhook is the one removed). The inputs refused.
async fn apply_inputs(suite: &Suite, ns: &str) -> anyhow::Result<Vec<String>> {
    let admin = suite.env.admin();
    let mut skipped = Vec::new();
    for input in ablation_inputs(suite, ns)? {
        let started = Instant::now();
        loop {
            match apply(&admin, &input).await {
                Ok(_) => break,
                Err(_) if started.elapsed() < Duration::from_secs(20) => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                Err(e) => {
                    skipped.push(format!("{}: {e}", input["metadata"]["name"]));
                    break;
                }
            }
        }
    }
    Ok(skipped)
}

/// A refused request: `verb group/resource/subresource namespace/name — message`.
fn refusal(e: &harness::Entry) -> String {
    let group = if e.group.is_empty() {
        String::new()
    } else {
        format!("{}/", e.group)
    };
    let sub = if e.subresource.is_empty() {
        String::new()
    } else {
        format!("/{}", e.subresource)
    };
    let at = if e.namespace.is_empty() {
        e.name.clone()
    } else {
        format!("{}/{}", e.namespace, e.name)
    };
    format!(
        "{} {group}{}{sub} {at} — {}",
        e.verb,
        e.resource,
        e.message.chars().take(240).collect::<String>()
    )
}
