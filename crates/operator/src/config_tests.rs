use super::*;

const HEAD: &str =
    "apiVersion: operator.config.dynamo.nvidia.com/v1alpha1\nkind: OperatorConfiguration\n";

fn file(body: &str) -> OperatorConfiguration {
    parse(&format!("{HEAD}{body}")).unwrap_or_else(|e| panic!("{body}: {e:?}"))
}

fn applied(body: &str, given: Given<'_>) -> RunArgs {
    let mut args = RunArgs::defaults();
    apply(&file(body), &mut args, given);
    args
}

/// Every field of the file, with the setting it changes: (field, YAML, check).
type Row = (&'static str, &'static str, fn(&RunArgs) -> bool);

const EVERY_FIELD: &[Row] = &[
    (
        "orchestrators.grove.enabled",
        "orchestrators: {grove: {enabled: false}}",
        |a| a.api_policy().grove == crate::optional_apis::Mode::Off,
    ),
    (
        "orchestrators.lws.enabled",
        "orchestrators: {lws: {enabled: true}}",
        |a| a.api_policy().lws == crate::optional_apis::Mode::On,
    ),
    ("dra.enabled", "dra: {enabled: false}", |a| {
        a.api_policy().dra == crate::optional_apis::Mode::Off
    }),
    ("gaie.enabled", "gaie: {enabled: true}", |a| {
        a.api_policy().gaie == crate::optional_apis::Mode::On
    }),
    (
        "server.metrics.bindAddress",
        "server: {metrics: {bindAddress: 10.0.0.1}}",
        |a| a.metrics_address.ip().to_string() == "10.0.0.1",
    ),
    (
        "server.metrics.port",
        "server: {metrics: {port: 9100}}",
        |a| a.metrics_address.port() == 9100,
    ),
    (
        "server.webhook.host",
        "server: {webhook: {host: 10.0.0.2}}",
        |a| a.webhook_address.ip().to_string() == "10.0.0.2",
    ),
    (
        "server.webhook.port",
        "server: {webhook: {port: 9444}}",
        |a| a.webhook_address.port() == 9444,
    ),
    (
        "server.webhook.certDir",
        "server: {webhook: {certDir: /certs}}",
        |a| a.webhook_cert_dir.as_deref() == Some(Path::new("/certs")), // path inside the container
    ),
    (
        "server.webhook.secretName",
        "server: {webhook: {secretName: ca}}",
        |a| a.webhook_secret == "ca",
    ),
    (
        "server.webhook.serviceName",
        "server: {webhook: {serviceName: hook}}",
        |a| a.webhook_service == "hook",
    ),
    (
        "leaderElection.enabled",
        "leaderElection: {enabled: false}",
        |a| !a.leader_elect,
    ),
    (
        "leaderElection.id",
        "leaderElection: {id: dynamo.nvidia.com}",
        |a| a.lease_name == "dynamo.nvidia.com",
    ),
    (
        "leaderElection.namespace",
        "leaderElection: {namespace: kube-system}",
        |a| a.lease_namespace.as_deref() == Some("kube-system"),
    ),
    (
        "namespace.restricted",
        "namespace: {restricted: team-a}",
        |a| {
            a.namespace.as_deref() == Some("team-a")
                && a.shared_config().scope
                    == reconcilers::shared::NamespaceScope::Restricted("team-a".into())
        },
    ),
    (
        "orchestrators.grove.terminationDelay",
        "orchestrators: {grove: {terminationDelay: 1h30m}}",
        |a| a.grove_termination_delay == "1h30m",
    ),
    (
        "infrastructure.natsAddress",
        "infrastructure: {natsAddress: nats://nats:4222}",
        |a| a.infrastructure().nats_address.as_deref() == Some("nats://nats:4222"),
    ),
    (
        "infrastructure.etcdAddress",
        "infrastructure: {etcdAddress: etcd:2379}",
        |a| a.infrastructure().etcd_address.as_deref() == Some("etcd:2379"),
    ),
    (
        "infrastructure.modelExpressURL",
        "infrastructure: {modelExpressURL: http://mx:8080}",
        |a| a.infrastructure().model_express_url.as_deref() == Some("http://mx:8080"),
    ),
    (
        "infrastructure.prometheusEndpoint",
        "infrastructure: {prometheusEndpoint: http://prom:9090}",
        |a| a.infrastructure().prometheus_endpoint.as_deref() == Some("http://prom:9090"),
    ),
    (
        "ingress.controllerClassName",
        "ingress: {controllerClassName: nginx}",
        |a| a.shared_config().ingress.controller_class_name.as_deref() == Some("nginx"),
    ),
    (
        "ingress.controllerTLSSecretName",
        "ingress: {controllerTLSSecretName: tls}",
        |a| {
            a.shared_config()
                .ingress
                .controller_tls_secret_name
                .as_deref()
                == Some("tls")
        },
    ),
    (
        "ingress.hostSuffix",
        "ingress: {hostSuffix: example.com}",
        |a| a.shared_config().ingress.host_suffix.as_deref() == Some("example.com"),
    ),
    (
        "ingress.virtualServiceGateway",
        "ingress: {virtualServiceGateway: istio-system/gw}",
        |a| a.shared_config().ingress.virtual_service_gateway.as_deref() == Some("istio-system/gw"),
    ),
    (
        "ingress.httpRouteGateway",
        "ingress: {httpRouteGateway: gateways/public}",
        |a| a.shared_config().ingress.http_route_gateway.as_deref() == Some("gateways/public"),
    ),
    (
        "rbac.plannerClusterRoleName",
        "rbac: {plannerClusterRoleName: planner-x}",
        |a| a.shared_config().planner_cluster_role.as_deref() == Some("planner-x"),
    ),
    (
        "rbac.eppClusterRoleName",
        "rbac: {eppClusterRoleName: epp-x}",
        |a| a.shared_config().epp_cluster_role.as_deref() == Some("epp-x"),
    ),
    (
        "mpi.sshSecretName",
        "mpi: {sshSecretName: mpi-run-ssh-secret}",
        |a| {
            a.shared_config()
                .ssh_keys
                .is_some_and(|k| k.secret_name == "mpi-run-ssh-secret")
        },
    ),
    (
        "mpi.sshSecretNamespace",
        "mpi: {sshSecretNamespace: dynamo-system}",
        |a| {
            a.shared_config()
                .ssh_keys
                .is_some_and(|k| k.source_namespace.as_deref() == Some("dynamo-system"))
        },
    ),
    ("checkpoint.enabled", "checkpoint: {enabled: false}", |a| {
        !a.shared_config().checkpoints_enabled
    }),
    ("logging.level", "logging: {level: debug}", |a| {
        a.log == "debug"
    }),
    ("logging.format", "logging: {format: json}", |a| {
        a.log_format == crate::cli::LogFormat::Json
    }),
    ("discovery.backend", "discovery: {backend: etcd}", |a| {
        a.shared_config().discovery_backend == reconcilers::discovery::DiscoveryBackend::Etcd
    }),
];

#[test]
fn every_field_has_its_effect() {
    let none = |_: &str| false;
    for (field, yaml, check) in EVERY_FIELD {
        let args = applied(yaml, &none);
        assert!(check(&args), "{field}: {yaml} had no effect: {args:?}");
    }
}

#[test]
fn every_field_is_in_the_table() {
    // Every leaf of a file that sets everything is a row of EVERY_FIELD (so a new field cannot
    // go without its effect test).
    let all: Vec<String> = EVERY_FIELD.iter().map(|(f, _, _)| f.to_string()).collect();
    let mut leaves = Vec::new();
    let full = file(
        "server: {metrics: {bindAddress: 0.0.0.0, port: 1}, webhook: {host: 0.0.0.0, port: 1, certDir: d, secretName: s, serviceName: s}}
leaderElection: {enabled: true, id: i, namespace: n}
namespace: {restricted: r}
orchestrators: {grove: {enabled: true, terminationDelay: 1m}, lws: {enabled: true}}
dra: {enabled: true}
gaie: {enabled: true}
infrastructure: {natsAddress: a, etcdAddress: a, modelExpressURL: a, prometheusEndpoint: a}
rbac: {plannerClusterRoleName: a, eppClusterRoleName: a, dgdrProfilingClusterRoleName: a}
mpi: {sshSecretName: mpi-run-ssh-secret, sshSecretNamespace: a}
checkpoint: {enabled: true}
discovery: {backend: kubernetes}
",
    );
    collect(&serde_json::to_value(&full).unwrap(), "", &mut leaves);
    let missing: Vec<&String> = leaves
        .iter()
        .filter(|l| {
            !all.contains(l)
                && !["apiVersion", "kind", "rbac.dgdrProfilingClusterRoleName"]
                    .contains(&l.as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "fields without an effect test: {missing:?}"
    );
}

fn collect(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    match value.as_object() {
        Some(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                collect(v, &path, out);
            }
        }
        None if !value.is_null() => out.push(prefix.to_string()),
        None => {}
    }
}

#[test]
fn flags_and_environment_override_the_file() {
    let given = |id: &str| id == "metrics_address" || id == "nats_address";
    let args = applied(
        "server: {metrics: {port: 9100}}\ninfrastructure: {natsAddress: nats://file, etcdAddress: etcd:1}\n",
        &given,
    );
    let defaults = RunArgs::defaults();
    assert_eq!(args.metrics_address, defaults.metrics_address);
    assert_eq!(args.nats_address, defaults.nats_address);
    assert_eq!(
        args.etcd_address.as_deref(),
        Some("etcd:1"),
        "what the flags do not give"
    );
}

#[test]
fn an_empty_file_changes_nothing() {
    let args = applied("", &|_| false);
    assert_eq!(format!("{args:?}"), format!("{:?}", RunArgs::defaults()));
}

#[test]
fn bad_files_are_refused_with_the_field_path() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown top-level field",
            "serviceMesh: {provider: istio}\n",
            "serviceMesh: unknown field `serviceMesh`",
        ),
        (
            "unknown nested field",
            "server: {healthProbe: {port: 8081}}\n",
            "server.healthProbe: unknown field `healthProbe`",
        ),
        (
            "misspelt field",
            "leaderElection: {enable: true}\n",
            "leaderElection.enable: unknown field `enable`",
        ),
        (
            "port out of range",
            "server: {metrics: {port: 70000}}\n",
            "server.metrics.port: invalid value",
        ),
        (
            "not an address",
            "server: {webhook: {host: localhost}}\n",
            "server.webhook.host: invalid IP address syntax",
        ),
        (
            "not a bool",
            "checkpoint: {enabled: sometimes}\n",
            "checkpoint.enabled: invalid type",
        ),
        (
            "bad duration",
            "orchestrators: {grove: {terminationDelay: soon}}\n",
            "orchestrators.grove.terminationDelay: \"soon\" is not a duration",
        ),
        (
            "bad log filter",
            "logging: {level: \"info,=[\"}\n",
            "logging.level: \"info,=[\" is not a level or a log filter expression",
        ),
        (
            "unknown discovery backend",
            "discovery: {backend: consul}\n",
            "discovery.backend: unknown variant `consul`",
        ),
        (
            "another SSH Secret",
            "mpi: {sshSecretName: my-keys}\n",
            "mpi.sshSecretName: \"my-keys\": only mpi-run-ssh-secret",
        ),
    ];
    for (name, body, expected) in cases {
        let (field, message) = parse(&format!("{HEAD}{body}")).unwrap_err();
        let said = if field.is_empty() {
            message
        } else {
            format!("{field}: {message}")
        };
        assert!(said.starts_with(expected), "{name}: {said}");
    }
    let (field, message) = parse("apiVersion: v1\nkind: OperatorConfiguration\n").unwrap_err();
    assert_eq!(
        (field.as_str(), message.as_str()),
        (
            "apiVersion",
            "\"v1\": expected operator.config.dynamo.nvidia.com/v1alpha1"
        )
    );
    let (field, _) =
        parse("apiVersion: operator.config.dynamo.nvidia.com/v1alpha1\nkind: Config\n")
            .unwrap_err();
    assert_eq!(field, "kind");
}

#[test]
fn go_durations() {
    for ok in ["0", "15m", "1h30m", "90s", "1.5h", "300ms", "2h45m10s"] {
        assert!(is_go_duration(ok), "{ok}");
    }
    for bad in ["", "15", "m", "-5m", "1d", "soon", "15 m"] {
        assert!(!is_go_duration(bad), "{bad}");
    }
}

#[test]
fn warns_of_what_has_no_effect() {
    assert!(warnings(&file("")).is_empty());
    let warned = warnings(&file("rbac: {dgdrProfilingClusterRoleName: profiling}\n"));
    assert_eq!(warned.len(), 1);
    assert!(warned[0].starts_with("rbac.dgdrProfilingClusterRoleName has no effect"));
}
