//! Every conformance manifest decodes into our types, validates, and encodes back to the same
//! JSON (nothing dropped, nothing invented).

mod common;

use common::{conformance_manifests, missing_fields};

fn typed_round_trip(
    value: &serde_json::Value,
) -> Result<(serde_json::Value, Result<(), api::InvalidSpec>), String> {
    let kind = value["kind"].as_str().unwrap_or_default();
    let version = value["apiVersion"].as_str().unwrap_or_default();
    let e = |e: serde_json::Error| e.to_string();
    Ok(match (version, kind) {
        ("nvidia.com/v1beta1", "DynamoGraphDeployment") => {
            let dgd: api::DynamoGraphDeployment =
                serde_json::from_value(value.clone()).map_err(e)?;
            (serde_json::to_value(&dgd).unwrap(), api::validate(&dgd))
        }
        ("nvidia.com/v1alpha1", "DynamoGraphDeployment") => {
            let dgd: api::v1alpha1::DynamoGraphDeployment =
                serde_json::from_value(value.clone()).map_err(e)?;
            let hub = api::conversion::to_v1beta1(&dgd);
            (serde_json::to_value(&dgd).unwrap(), api::validate(&hub))
        }
        ("nvidia.com/v1alpha1", "DynamoCheckpoint") => {
            let ckpt: api::DynamoCheckpoint = serde_json::from_value(value.clone()).map_err(e)?;
            (
                serde_json::to_value(&ckpt).unwrap(),
                api::validate::validate_checkpoint(&ckpt),
            )
        }
        other => return Err(format!("no type for {other:?}")),
    })
}

#[test]
fn every_conformance_manifest_decodes_validates_and_encodes_back_unchanged() {
    let mut failures = Vec::new();
    for m in conformance_manifests() {
        match typed_round_trip(&m.value) {
            Err(e) => failures.push(format!("{}: {e}", m.label())),
            Ok((encoded, valid)) => {
                if let Err(e) = valid {
                    failures.push(format!("{}: invalid: {e}", m.label()));
                }
                let lost = missing_fields(&m.value, &encoded);
                let invented = missing_fields(&encoded, &m.value);
                if !lost.is_empty() || !invented.is_empty() {
                    failures.push(format!(
                        "{}: lost {lost:?}, invented {invented:?}",
                        m.label()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
