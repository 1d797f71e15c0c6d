//! The inventory: every object the operator owns, and what is wrong with it (orphans).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bench::cluster::dgd_resource;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::{Differences, Features, Fingerprint, TEMPLATE_LABEL, compare, fingerprint};

/// A kind the inventory lists.
#[derive(Clone)]
pub struct Kind {
    pub kind: &'static str,
    pub ar: ApiResource,
}

/// The kinds graphs and checkpoints produce (and the graphs themselves).
pub fn inventory_kinds(features: Features) -> Vec<Kind> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    let mut kinds = vec![
        Kind {
            kind: "DynamoGraphDeployment",
            ar: dgd_resource("v1beta1"),
        },
        Kind {
            kind: "DynamoComponentDeployment",
            ar: ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        },
        Kind {
            kind: "DynamoGraphDeploymentScalingAdapter",
            ar: ApiResource::erase::<api::DynamoGraphDeploymentScalingAdapter>(&()),
        },
        Kind {
            kind: "DynamoCheckpoint",
            ar: ApiResource::erase::<api::DynamoCheckpoint>(&()),
        },
        Kind {
            kind: "Deployment",
            ar: ApiResource::erase::<Deployment>(&()),
        },
        Kind {
            kind: "Service",
            ar: ApiResource::erase::<Service>(&()),
        },
        Kind {
            kind: "ServiceAccount",
            ar: ApiResource::erase::<ServiceAccount>(&()),
        },
        Kind {
            kind: "Role",
            ar: ApiResource::erase::<Role>(&()),
        },
        Kind {
            kind: "RoleBinding",
            ar: ApiResource::erase::<RoleBinding>(&()),
        },
        Kind {
            kind: "ConfigMap",
            ar: ApiResource::erase::<ConfigMap>(&()),
        },
        Kind {
            kind: "PersistentVolumeClaim",
            ar: ApiResource::erase::<PersistentVolumeClaim>(&()),
        },
        Kind {
            kind: "Secret",
            ar: ApiResource::erase::<Secret>(&()),
        },
        Kind {
            kind: "Job",
            ar: ApiResource::erase::<Job>(&()),
        },
        Kind {
            kind: "ResourceClaimTemplate",
            ar: ApiResource::erase::<ResourceClaimTemplate>(&()),
        },
        Kind {
            kind: "InferencePool",
            ar: reconcilers::epp::inference_pool_resource(),
        },
    ];
    if features.grove {
        kinds.push(Kind {
            kind: "PodCliqueSet",
            ar: ApiResource::erase::<api::grove::PodCliqueSet>(&()),
        });
    }
    kinds
}

/// One listed object.
#[derive(Clone, Debug)]
pub struct Obj {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The controller owner reference: (kind, name, uid).
    pub owner: Option<(String, String, String)>,
    pub labels: BTreeMap<String, String>,
    pub managers: Vec<String>,
    pub deleting: bool,
    /// The object, without Secret data.
    pub value: Value,
}

/// Every object of the inventory kinds in some namespaces, at one moment.
pub struct Snapshot {
    pub objects: Vec<Obj>,
}

impl Snapshot {
    pub async fn take(
        client: &Client,
        kinds: &[Kind],
        namespaces: &[String],
    ) -> anyhow::Result<Snapshot> {
        let mut objects = Vec::new();
        for ns in namespaces {
            for kind in kinds {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.ar);
                let list = if kind.kind == "Secret" {
                    api.list_metadata(&ListParams::default()).await.map(|l| {
                        l.items
                            .into_iter()
                            .map(|m| DynamicObject {
                                types: None,
                                metadata: m.metadata,
                                data: Value::Null,
                            })
                            .collect::<Vec<_>>()
                    })
                } else {
                    api.list(&ListParams::default()).await.map(|l| l.items)
                };
                let items = match list {
                    Ok(items) => items,
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(e.into()),
                };
                for item in items {
                    let owner = item
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .find(|o| o.controller == Some(true))
                        .map(|o| (o.kind.clone(), o.name.clone(), o.uid.clone()));
                    let managers = item
                        .metadata
                        .managed_fields
                        .iter()
                        .flatten()
                        .filter_map(|m| m.manager.clone())
                        .collect();
                    objects.push(Obj {
                        kind: kind.kind,
                        namespace: ns.clone(),
                        name: item.name_any(),
                        uid: item.metadata.uid.clone().unwrap_or_default(),
                        owner,
                        labels: item.metadata.labels.clone().unwrap_or_default(),
                        managers,
                        deleting: item.metadata.deletion_timestamp.is_some(),
                        value: serde_json::to_value(&item)?,
                    });
                }
            }
        }
        Ok(Snapshot { objects })
    }

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Obj> + 'a {
        self.objects.iter().filter(move |o| o.kind == kind)
    }

    /// The controller owners of `uid`, nearest first.
    pub fn ancestors(&self, uid: &str) -> Vec<String> {
        let by_uid: HashMap<&str, &Obj> =
            self.objects.iter().map(|o| (o.uid.as_str(), o)).collect();
        let mut out = Vec::new();
        let mut at = by_uid.get(uid).copied();
        while let Some(o) = at {
            let Some((_, _, owner)) = &o.owner else { break };
            if out.contains(owner) {
                break;
            }
            out.push(owner.clone());
            at = by_uid.get(owner.as_str()).copied();
        }
        out
    }

    /// Objects whose controller-owner chain leads to `uid` (children, grandchildren, ...).
    pub fn descendants(&self, uid: &str) -> Vec<&Obj> {
        let mut by_owner: HashMap<&str, Vec<&Obj>> = HashMap::new();
        for o in &self.objects {
            if let Some((_, _, owner)) = &o.owner {
                by_owner.entry(owner.as_str()).or_default().push(o);
            }
        }
        let mut out = Vec::new();
        let mut todo = vec![uid];
        while let Some(u) = todo.pop() {
            for child in by_owner.get(u).into_iter().flatten() {
                out.push(*child);
                todo.push(child.uid.as_str());
            }
        }
        out
    }

    /// Objects whose controller owner is one of our kinds but no longer exists, and objects
    /// written by the operator that no graph, component or checkpoint owns although their kind
    /// is always owned.
    pub fn orphans(&self) -> Vec<String> {
        let live: BTreeSet<&str> = self.objects.iter().map(|o| o.uid.as_str()).collect();
        let ours = [
            "DynamoGraphDeployment",
            "DynamoComponentDeployment",
            "DynamoCheckpoint",
            "DynamoGraphDeploymentScalingAdapter",
        ];
        self.objects
            .iter()
            .filter(|o| !o.deleting)
            .filter_map(|o| match &o.owner {
                Some((kind, name, uid))
                    if ours.contains(&kind.as_str()) && !live.contains(uid.as_str()) =>
                {
                    Some(format!(
                        "{} {}/{} (owner {kind} {name} {uid} is gone)",
                        o.kind, o.namespace, o.name
                    ))
                }
                None if ALWAYS_OWNED.contains(&o.kind)
                    && o.managers.iter().any(|m| m.starts_with("dynamo-operator")) =>
                {
                    Some(format!(
                        "{} {}/{} (written by the operator, owned by nothing)",
                        o.kind, o.namespace, o.name
                    ))
                }
                _ => None,
            })
            .collect()
    }
}

/// Kinds the operator only ever creates with a controller owner.
const ALWAYS_OWNED: &[&str] = &[
    "DynamoComponentDeployment",
    "DynamoGraphDeploymentScalingAdapter",
    "Deployment",
    "Service",
    "Job",
    "ResourceClaimTemplate",
    "InferencePool",
    "PodCliqueSet",
];

/// Polls until the snapshot of `namespaces` has no orphans (garbage collection is
/// asynchronous), returning the last orphans found on timeout and the last snapshot.
pub async fn settle_orphans(
    client: &Client,
    kinds: &[Kind],
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<(Snapshot, Vec<String>)> {
    let started = Instant::now();
    loop {
        let snapshot = Snapshot::take(client, kinds, namespaces).await?;
        let orphans = snapshot.orphans();
        if orphans.is_empty() || started.elapsed() > timeout {
            return Ok((snapshot, orphans));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Checks every live graph of `snapshot` against the reference fingerprint of its template.
pub fn check_graphs(
    snapshot: &Snapshot,
    references: &BTreeMap<String, Fingerprint>,
) -> (usize, Differences) {
    let mut all = Differences::default();
    let mut checked = 0;
    for dgd in snapshot
        .of_kind("DynamoGraphDeployment")
        .filter(|d| !d.deleting)
    {
        let Some(template) = dgd.labels.get(TEMPLATE_LABEL) else {
            continue;
        };
        let Some(reference) = references.get(template) else {
            continue;
        };
        let actual = fingerprint(snapshot, dgd);
        checked += 1 + actual.values().map(Vec::len).sum::<usize>();
        let d = compare(
            reference,
            &actual,
            &format!("{}/{}", dgd.namespace, dgd.name),
        );
        all.lost.extend(d.lost);
        all.duplicated.extend(d.duplicated);
        all.wrong.extend(d.wrong);
    }
    (checked, all)
}
