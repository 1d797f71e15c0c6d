//! Operator-level settings every Dynamo pod receives as env (upstream's infrastructure
//! configuration): each set only when the operator has a value, under the user's env (a user
//! value of the same name wins), on `main` and on the `frontendSidecar` container, for every
//! component type. The discovery backend does not change them.

use k8s_openapi::api::core::v1::EnvVar;

use crate::parts::env;

/// The infrastructure endpoints of the operator's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Infrastructure {
    /// NATS address (`NATS_SERVER`).
    pub nats_address: Option<String>,
    /// etcd endpoints (`ETCD_ENDPOINTS`).
    pub etcd_address: Option<String>,
    /// Model Express URL (`MODEL_EXPRESS_URL`).
    pub model_express_url: Option<String>,
    /// Prometheus endpoint (`PROMETHEUS_ENDPOINT`).
    pub prometheus_endpoint: Option<String>,
}

impl Infrastructure {
    /// The env vars of the settings that are set (empty values count as unset).
    pub fn env(&self) -> Vec<EnvVar> {
        [
            ("NATS_SERVER", &self.nats_address),
            ("ETCD_ENDPOINTS", &self.etcd_address),
            ("MODEL_EXPRESS_URL", &self.model_express_url),
            ("PROMETHEUS_ENDPOINT", &self.prometheus_endpoint),
        ]
        .into_iter()
        .filter_map(|(name, value)| {
            value
                .as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| env(name, v))
        })
        .collect()
    }
}
