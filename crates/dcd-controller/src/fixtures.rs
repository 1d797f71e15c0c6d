//! Test fixtures: DCDs built from the conformance manifests the way the component program
//! generates them (name `<dgd>-<component lowercased>`, graph labels, a controller owner
//! reference to the graph, the graph's env merged into `main`). Integration tests include this file
//! by path, so it uses only the public API.

use std::path::{Path, PathBuf};

use api::v1beta1::MAIN_CONTAINER_NAME;
use api::{
    DynamoComponentDeployment, DynamoComponentDeploymentSpec, DynamoGraphDeployment, labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

/// Namespace of fixtures.
pub const NS: &str = "ns";

/// Every DynamoGraphDeployment of the v1beta1 and v1alpha1 conformance folders, as v1beta1.
pub fn conformance_graphs() -> Vec<(PathBuf, DynamoGraphDeployment)> {
    let mut out = Vec::new();
    for (folder, alpha) in [("v1beta1", false), ("v1alpha1", true)] {
        for path in testkit::testdata::yaml_files(folder) {
            let text = std::fs::read_to_string(&path).unwrap();
            let dgd = if alpha {
                let a: api::v1alpha1::DynamoGraphDeployment = serde_yaml::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                api::conversion::to_v1beta1(&a)
            } else {
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            };
            out.push((path, dgd));
        }
    }
    assert!(!out.is_empty(), "no conformance manifests");
    out
}

/// The conformance graph of `folder/file`.
pub fn graph(folder: &str, file: &str) -> DynamoGraphDeployment {
    conformance_graphs()
        .into_iter()
        .find(|(p, _)| p.ends_with(Path::new(folder).join(file)))
        .unwrap_or_else(|| panic!("no conformance manifest {folder}/{file}"))
        .1
}

/// The DCD the component program generates for `component` of `dgd`, in [`NS`].
pub fn dcd_of(dgd: &DynamoGraphDeployment, component: &str) -> DynamoComponentDeployment {
    let graph = dgd.name_any();
    let mut spec = dgd
        .spec
        .component(component)
        .unwrap_or_else(|| panic!("{graph} has no component {component}"))
        .clone();
    if !dgd.spec.env.is_empty()
        && let Some(main) = spec
            .pod_template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .and_then(|s| {
                s.containers
                    .iter_mut()
                    .find(|c| c.name == MAIN_CONTAINER_NAME)
            })
    {
        // The graph's env first; the component's entries of the same name win.
        let own = main.env.take().unwrap_or_default();
        let mut env: Vec<_> = dgd
            .spec
            .env
            .iter()
            .filter(|e| !own.iter().any(|o| o.name == e.name))
            .cloned()
            .collect();
        env.extend(own);
        main.env = Some(env);
    }
    let mut l = std::collections::BTreeMap::from([
        (
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            graph.clone(),
        ),
        (labels::DYNAMO_COMPONENT.to_string(), spec.name.clone()),
    ]);
    if let Some(t) = spec.r#type {
        l.insert(labels::DYNAMO_COMPONENT_TYPE.into(), t.as_str().into());
    }
    DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some(format!("{graph}-{}", component.to_lowercase())),
            namespace: Some(NS.into()),
            labels: Some(l),
            owner_references: Some(vec![OwnerReference {
                api_version: "nvidia.com/v1beta1".into(),
                kind: "DynamoGraphDeployment".into(),
                name: graph,
                uid: "dgd-uid".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: DynamoComponentDeploymentSpec {
            backend_framework: dgd.spec.backend_framework,
            component: spec,
        },
        status: None,
    }
}

/// The DCD of `component` of the conformance manifest `folder/file`, with a uid (as stored).
pub fn conformance_dcd(folder: &str, file: &str, component: &str) -> DynamoComponentDeployment {
    let mut dcd = dcd_of(&graph(folder, file), component);
    dcd.metadata.uid = Some("dcd-uid".into());
    dcd.metadata.generation = Some(1);
    dcd
}
