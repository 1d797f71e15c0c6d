//! DynamoWorkerMetadata, nvidia.com/v1alpha1: what one Dynamo worker container publishes for
//! Kubernetes discovery (its endpoints and model cards), written by the worker itself.
//!
//! The operator ships the CRD and grants the graph's discovery ServiceAccount the right to
//! write it (see `reconcilers::discovery`); it never reads or writes these objects. A worker
//! applies one per container (`<pod>-<container>`, server-side apply, field manager
//! `dynamo-worker`) with a non-controlling owner reference to its Pod, so garbage collection
//! removes it with the Pod. Group, version, names and schema are upstream's, so workers of any
//! Dynamo release find it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Discovery metadata of one Dynamo worker container.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "DynamoWorkerMetadata",
    plural = "dynamoworkermetadatas",
    namespaced,
    shortname = "dwm",
    derive = "PartialEq",
    doc = "DynamoWorkerMetadata stores the discovery metadata of one Dynamo worker container; the worker writes it, garbage collection removes it with the worker's Pod.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since creation"
    )
)]
pub struct DynamoWorkerMetadataSpec {
    /// The worker's discovery metadata (endpoints and model cards), as the Dynamo runtime
    /// serializes it; kept as-is.
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub data: serde_json::Value,
}
