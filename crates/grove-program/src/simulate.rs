//! Playing Grove's controller where it cannot run (tests, `cargo xtask dev`): what Grove does
//! with a PodCliqueSet this program wrote, reduced to what the program reads back. For each
//! component, the PodClique or PodCliqueScalingGroup Grove would create (Grove's names, the
//! graph and component labels; one PodCliqueScalingGroup per component group, labelled with the
//! group), then their status with every pod ready, then the PodCliqueSet's status observing its
//! generation.

use api::grove::{
    PodClique, PodCliqueResourceSpec, PodCliqueScalingGroup, PodCliqueScalingGroupConfig,
    PodCliqueScalingGroupSpec, PodCliqueSet, PodCliqueTemplateSpec,
};
use api::{DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment, labels};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::grove_render::names::component_child;

/// Plays Grove for `pcs`, the PodCliqueSet of `dgd`, in `namespace`, as `client`: creates each
/// component's PodClique / PodCliqueScalingGroup if missing and reports them, and the set,
/// ready at the set's generation.
pub async fn play_grove(
    client: &Client,
    namespace: &str,
    dgd: &DynamoGraphDeployment,
    pcs: &PodCliqueSet,
) -> kube::Result<()> {
    let pcs_name = pcs.name_any();
    let generation = pcs.metadata.generation.unwrap_or_default();
    let hash = format!("rev-{generation}");
    let pp = PatchParams::default();
    let cliques: Api<PodClique> = Api::namespaced(client.clone(), namespace);
    let groups: Api<PodCliqueScalingGroup> = Api::namespaced(client.clone(), namespace);
    let mut played = std::collections::BTreeSet::new();
    for c in &dgd.spec.components {
        let child = component_child(&pcs_name, &dgd.spec, c);
        if !played.insert(child.name.clone()) {
            continue;
        }
        let lower = child.template;
        let meta = child_metadata(dgd, c, child.name);
        if child.scaling_group {
            let Some(config) = pcs
                .spec
                .template
                .pod_clique_scaling_groups
                .iter()
                .find(|g| g.name == lower)
            else {
                continue;
            };
            play_scaling_group(&groups, meta, config, &hash).await?;
        } else {
            let Some(clique) = pcs.spec.template.cliques.iter().find(|t| t.name == lower) else {
                continue;
            };
            play_clique(&cliques, meta, clique, &hash).await?;
        }
    }
    let sets: Api<PodCliqueSet> = Api::namespaced(client.clone(), namespace);
    let status = json!({"status": {
        "observedGeneration": generation, "replicas": 1, "availableReplicas": 1,
        "updatedReplicas": 1, "currentGenerationHash": hash,
    }});
    sets.patch_status(&pcs_name, &pp, &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Metadata of the child `name` Grove creates for component `c`: the graph label, and the
/// component group's label (its group) or the component's.
fn child_metadata(
    dgd: &DynamoGraphDeployment,
    c: &DynamoComponentDeploymentSharedSpec,
    name: String,
) -> ObjectMeta {
    let owner = match dgd.spec.component_group(&c.name) {
        Some(group) => (labels::DYNAMO_COMPONENT_GROUP, group.name.clone()),
        None => (labels::DYNAMO_COMPONENT, c.name.clone()),
    };
    ObjectMeta {
        name: Some(name),
        labels: Some(
            [
                (
                    labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                    dgd.name_any(),
                ),
                (owner.0.to_string(), owner.1),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The PodCliqueScalingGroup of `config` (created with `meta` if missing), reported with every
/// replica ready at the set's generation `hash`.
async fn play_scaling_group(
    groups: &Api<PodCliqueScalingGroup>,
    meta: ObjectMeta,
    config: &PodCliqueScalingGroupConfig,
    hash: &str,
) -> kube::Result<()> {
    let name = meta.name.clone().unwrap_or_default();
    let current = match groups.get_opt(&name).await? {
        Some(g) => g,
        None => {
            let group = PodCliqueScalingGroup {
                metadata: meta,
                spec: PodCliqueScalingGroupSpec {
                    replicas: Some(config.replicas.unwrap_or(1)),
                    min_available: config.min_available,
                    clique_names: config.clique_names.clone(),
                },
                status: None,
            };
            groups.create(&PostParams::default(), &group).await?
        }
    };
    let desired = current.spec.replicas.unwrap_or(1);
    let status = json!({"status": {
        "observedGeneration": current.metadata.generation,
        "replicas": desired, "scheduledReplicas": desired,
        "availableReplicas": desired, "updatedReplicas": desired,
        "currentPodCliqueSetGenerationHash": hash,
    }});
    groups
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The PodClique of `clique` (created with `meta` if missing), reported with every replica
/// ready at the set's generation `hash`.
async fn play_clique(
    cliques: &Api<PodClique>,
    meta: ObjectMeta,
    clique: &PodCliqueTemplateSpec,
    hash: &str,
) -> kube::Result<()> {
    let name = meta.name.clone().unwrap_or_default();
    let current = match cliques.get_opt(&name).await? {
        Some(c) => c,
        None => {
            let clique = PodClique {
                metadata: meta,
                spec: PodCliqueResourceSpec {
                    clique: clique.spec.clone(),
                },
                status: None,
            };
            cliques.create(&PostParams::default(), &clique).await?
        }
    };
    let desired = current.spec.clique.replicas;
    let status = json!({"status": {
        "observedGeneration": current.metadata.generation,
        "replicas": desired, "readyReplicas": desired, "updatedReplicas": desired,
        "scheduledReplicas": desired, "scheduleGatedReplicas": 0,
        "currentPodCliqueSetGenerationHash": hash,
    }});
    cliques
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}
