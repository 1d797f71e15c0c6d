//! The labels and annotations the children carry: Kubernetes' rules on keys, values and the
//! total size of annotations, checked here because the apiserver would refuse every child
//! write instead.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Rule;
use super::collector::{Collector, Seg};
use crate::metadata::{self, TOTAL_ANNOTATION_SIZE_LIMIT, quoted};
use crate::v1beta1::DynamoGraphDeploymentSpec;

/// Labels and annotations every child carries (Kubernetes' rules; the apiserver would
/// refuse every child write instead).
pub(super) fn graph_metadata(spec: &DynamoGraphDeploymentSpec, v: &mut Collector) {
    let annotations = [Seg::Key("annotations")];
    annotation_keys(&spec.annotations, &annotations, v);
    let size = metadata::annotations_size(&spec.annotations);
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        v.at(&annotations).push(
            Rule::AnnotationsSize,
            format!(
                "must total at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes (keys and values), has {size}"
            ),
        );
    }
    label_entries(&spec.labels, &[Seg::Key("labels")], v);
}

/// The labels and annotations of a pod template at `template` (its `metadata`): keys and
/// values, and the total size of its annotations together with the `inherited` ones it does not
/// override (the graph's `spec.annotations`, unless they are too large on their own).
pub(super) fn pod_metadata(
    meta: Option<&ObjectMeta>,
    template: &[Seg],
    inherited: Option<&BTreeMap<String, String>>,
    v: &mut Collector,
) {
    let empty = BTreeMap::new();
    let own = meta.and_then(|m| m.annotations.as_ref()).unwrap_or(&empty);
    let annotations = [template, &[Seg::Key("metadata"), Seg::Key("annotations")]].concat();
    annotation_keys(own, &annotations, v);
    let own_size = metadata::annotations_size(own);
    let inherited = inherited
        .filter(|i| metadata::annotations_size(*i) <= TOTAL_ANNOTATION_SIZE_LIMIT)
        .unwrap_or(&empty);
    let inherited_size =
        metadata::annotations_size(inherited.iter().filter(|(k, _)| !own.contains_key(*k)));
    let size = own_size + inherited_size;
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        let with = if own_size <= TOTAL_ANNOTATION_SIZE_LIMIT {
            "together with spec.annotations "
        } else {
            ""
        };
        v.at(&annotations).push(
            Rule::AnnotationsSize,
            format!(
                "{with}must total at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes (keys and values), \
                 has {size}"
            ),
        );
    }
    if let Some(labels) = meta.and_then(|m| m.labels.as_ref()) {
        let path = [template, &[Seg::Key("metadata"), Seg::Key("labels")]].concat();
        label_entries(labels, &path, v);
    }
}

/// Kubernetes' label rules on every entry of `labels` (at `path`).
fn label_entries(labels: &BTreeMap<String, String>, path: &[Seg], v: &mut Collector) {
    for (key, value) in labels {
        if let Some(problems) = metadata::label_key_problems(key) {
            v.at(path).push(
                Rule::LabelKey,
                format!("invalid label key {}: {problems}", quoted(key)),
            );
        }
        if let Some(problems) = metadata::label_value_problems(value) {
            v.at(path).push(
                Rule::LabelValue,
                format!(
                    "invalid value {} of label {}: {problems}",
                    quoted(value),
                    quoted(key)
                ),
            );
        }
    }
}

/// Kubernetes' annotation key rule on every key of `annotations` (at `path`).
fn annotation_keys(annotations: &BTreeMap<String, String>, path: &[Seg], v: &mut Collector) {
    for key in annotations.keys() {
        if let Some(problems) = metadata::annotation_key_problems(key) {
            v.at(path).push(
                Rule::AnnotationKey,
                format!("invalid annotation key {}: {problems}", quoted(key)),
            );
        }
    }
}
