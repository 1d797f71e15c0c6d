//! Component names: unique, case-insensitively, and at most one component of type epp.

use std::collections::BTreeMap;

use super::Rule;
use super::collector::{Collector, Seg};
use crate::v1beta1::{ComponentType, DynamoGraphDeploymentSpec};

/// Names and epp count (also CEL; repeated so that objects built in code are checked).
pub(super) fn component_names(spec: &DynamoGraphDeploymentSpec, v: &mut Collector) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut epp: Option<usize> = None;
    for (i, c) in spec.components.iter().enumerate() {
        let key = c.name.to_ascii_lowercase();
        if let Some(first) = seen.get(&key) {
            v.at(&[Seg::Key("components"), Seg::Index(i), Seg::Key("name")])
                .push(
                    Rule::DuplicateComponentName,
                    format!(
                        "duplicates components[{first}].name ({}), case-insensitively",
                        spec.components[*first].name
                    ),
                );
        } else {
            seen.insert(key, i);
        }
        if c.r#type == Some(ComponentType::Epp) {
            if let Some(first) = epp {
                v.at(&[Seg::Key("components"), Seg::Index(i), Seg::Key("type")])
                    .push(
                        Rule::MultipleEpp,
                        format!(
                            "at most one component may have type epp (components[{first}] has it)"
                        ),
                    );
            } else {
                epp = Some(i);
            }
        }
    }
}
