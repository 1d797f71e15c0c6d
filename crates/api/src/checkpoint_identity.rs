//! The identity hash of a checkpoint: which inputs make two checkpoints equivalent.
//!
//! Computed exactly as upstream Dynamo computes it (`ComputeIdentityHash`), so checkpoints
//! created by either operator have the same hash and name:
//! 1. normalize: `tensorParallelSize` and `pipelineParallelSize` default to 1 (unset or 0);
//! 2. serialize this JSON object, fields in this order, no whitespace, Go's encoding rules:
//!    `model`, `backendFramework`, `dynamoVersion` (left out when empty, so checkpoints stay
//!    portable across releases), `tensorParallelSize`, `pipelineParallelSize`, `dtype` (left out
//!    when empty), `maxModelLen` (left out when unset or 0), `extraParameters` (keys sorted; left
//!    out when empty);
//! 3. SHA-256 of those bytes, the first [`IDENTITY_HASH_LEN`] hex characters (lowercase).
//!
//! The bytes are Go's `encoding/json` output ([`crate::gojson`]: its string escaping included),
//! so they are the same as upstream's for every input.

use sha2::{Digest, Sha256};

use crate::common::DynamoCheckpointIdentity;

/// Length of an identity hash in hex characters (64 bits).
pub const IDENTITY_HASH_LEN: usize = 16;

/// The identity hash of `identity` (16 lowercase hex characters).
pub fn identity_hash(identity: &DynamoCheckpointIdentity) -> String {
    let digest = Sha256::digest(canonical_json(identity).as_bytes());
    let mut hex = hex::encode(digest);
    hex.truncate(IDENTITY_HASH_LEN);
    hex
}

/// The canonical JSON the identity hash is computed over: Go's encoding of upstream's identity
/// struct ([`crate::gojson`]), after normalizing the parallel sizes.
pub fn canonical_json(identity: &DynamoCheckpointIdentity) -> String {
    let parallel = |size: Option<i32>| match size {
        None | Some(0) => 1,
        Some(n) => n,
    };
    let mut value = serde_json::to_value(identity).expect("an identity serializes");
    value["tensorParallelSize"] = parallel(identity.tensor_parallel_size).into();
    value["pipelineParallelSize"] = parallel(identity.pipeline_parallel_size).into();
    crate::gojson::encode("struct:DynamoCheckpointIdentity", &value)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::common::BackendFramework;

    fn identity(model: &str, backend: BackendFramework) -> DynamoCheckpointIdentity {
        DynamoCheckpointIdentity {
            model: model.into(),
            backend_framework: backend,
            ..Default::default()
        }
    }

    /// Known vectors from upstream's own test of `ComputeIdentityHash`.
    #[test]
    fn matches_upstream_known_hashes() {
        let basic = identity("meta-llama/Llama-2-7b-hf", BackendFramework::Vllm);
        assert_eq!(identity_hash(&basic), "96429b2725761a09");
        let full = DynamoCheckpointIdentity {
            dynamo_version: Some("0.4.2".into()),
            tensor_parallel_size: Some(2),
            pipeline_parallel_size: Some(1),
            dtype: Some("float16".into()),
            max_model_len: Some(4096),
            extra_parameters: BTreeMap::from([(
                "gpu_memory_utilization".to_string(),
                "0.9".to_string(),
            )]),
            ..identity("meta-llama/Llama-2-13b-hf", BackendFramework::Sglang)
        };
        assert_eq!(identity_hash(&full), "f4ba65bccbb8e4fb");
    }

    #[test]
    fn canonical_json_field_order_and_omissions() {
        let id = DynamoCheckpointIdentity {
            dtype: Some("bfloat16".into()),
            max_model_len: Some(4096),
            tensor_parallel_size: Some(1),
            ..identity("Qwen/Qwen3-0.6B", BackendFramework::Vllm)
        };
        assert_eq!(
            canonical_json(&id),
            r#"{"model":"Qwen/Qwen3-0.6B","backendFramework":"vllm","tensorParallelSize":1,"pipelineParallelSize":1,"dtype":"bfloat16","maxModelLen":4096}"#
        );
        assert_eq!(identity_hash(&id), "3bff874d069f0ed5");
    }

    #[test]
    fn defaults_and_empty_values_normalize() {
        let base = identity("m", BackendFramework::Trtllm);
        let explicit = DynamoCheckpointIdentity {
            tensor_parallel_size: Some(1),
            pipeline_parallel_size: Some(0),
            max_model_len: Some(0),
            dynamo_version: Some(String::new()),
            dtype: Some(String::new()),
            ..base.clone()
        };
        assert_eq!(identity_hash(&base), identity_hash(&explicit));
        assert_eq!(
            canonical_json(&base),
            r#"{"model":"m","backendFramework":"trtllm","tensorParallelSize":1,"pipelineParallelSize":1}"#
        );
    }

    #[test]
    fn every_input_field_changes_the_hash() {
        let base = identity("m", BackendFramework::Vllm);
        let variants = [
            identity("n", BackendFramework::Vllm),
            identity("m", BackendFramework::Sglang),
            DynamoCheckpointIdentity {
                dynamo_version: Some("1.0".into()),
                ..base.clone()
            },
            DynamoCheckpointIdentity {
                tensor_parallel_size: Some(2),
                ..base.clone()
            },
            DynamoCheckpointIdentity {
                pipeline_parallel_size: Some(2),
                ..base.clone()
            },
            DynamoCheckpointIdentity {
                dtype: Some("fp8".into()),
                ..base.clone()
            },
            DynamoCheckpointIdentity {
                max_model_len: Some(8192),
                ..base.clone()
            },
            DynamoCheckpointIdentity {
                extra_parameters: BTreeMap::from([("k".to_string(), "v".to_string())]),
                ..base.clone()
            },
        ];
        let h = identity_hash(&base);
        for v in &variants {
            assert_ne!(identity_hash(v), h, "{}", canonical_json(v));
        }
    }

    #[test]
    fn extra_parameters_are_sorted_and_escaped_like_go() {
        let id = DynamoCheckpointIdentity {
            extra_parameters: BTreeMap::from([
                ("b".to_string(), "<x & y>".to_string()),
                ("a".to_string(), "q\"\\\n\u{1}\u{2028}é".to_string()),
            ]),
            ..identity("m", BackendFramework::Vllm)
        };
        assert_eq!(
            canonical_json(&id),
            "{\"model\":\"m\",\"backendFramework\":\"vllm\",\"tensorParallelSize\":1,\"pipelineParallelSize\":1,\
             \"extraParameters\":{\"a\":\"q\\\"\\\\\\n\\u0001\\u2028é\",\"b\":\"\\u003cx \\u0026 y\\u003e\"}}"
        );
        assert_eq!(identity_hash(&id).len(), IDENTITY_HASH_LEN);
        assert!(
            identity_hash(&id)
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}
