//! A complete small controller on `kit`: a `Mirror` keeps a copy of a ConfigMap.
//!
//! ```sh
//! cargo run -p kit --example mirror   # uses the current kubeconfig context
//! ```

mod controller;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, CustomResourceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let client = Client::try_default().await?;
    // Install (or update) the CRD by server-side apply.
    let crd = controller::Mirror::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(controller::MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    controller::run(client, None, shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::conditions::{self, READY};
    use kit::run::finish;
    use kit::testing::{Double, Verb};
    use kit::{Error, Retry};
    use kube::runtime::controller::Action;

    use super::controller::{Ctx, Mirror, MirrorSpec, reconcile};

    fn fixture(d: &Double) -> Arc<Mirror> {
        let mut m = Mirror::new(
            "m",
            MirrorSpec {
                source: "src".into(),
            },
        );
        m.metadata.namespace = Some("ns".into());
        Arc::new(d.insert(m))
    }

    fn source(d: &Double, data: &[(&str, &str)]) {
        d.insert(ConfigMap {
            metadata: ObjectMeta {
                name: Some("src".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        });
    }

    fn ctx(d: &Double) -> Arc<Ctx> {
        Arc::new(Ctx {
            reader: d.reader(),
            writer: d.writer(),
        })
    }

    /// One pass of the run loop on the double: reconcile, persist, publish.
    async fn pass(d: &Double, name: &str) -> Result<Action, kit::run::RunError<Error>> {
        let mirror: Arc<Mirror> = Arc::new(d.object(Some("ns"), name).unwrap());
        let result = reconcile(mirror.clone(), ctx(d)).await;
        finish(
            mirror.as_ref(),
            result,
            d.status_writer().as_ref(),
            d.event_sink().as_ref(),
        )
        .await
    }

    #[tokio::test]
    async fn copies_the_source_and_reports_ready() {
        let d = Double::new();
        fixture(&d);
        source(&d, &[("a", "1"), ("b", "2")]);
        assert_eq!(pass(&d, "m").await.unwrap(), Action::await_change());
        let copy: ConfigMap = d.object(Some("ns"), "m-mirror").unwrap();
        assert_eq!(copy.data.unwrap().len(), 2);
        assert_eq!(copy.metadata.owner_references.unwrap()[0].name, "m");
        let m: Mirror = d.object(Some("ns"), "m").unwrap();
        let status = m.status.unwrap();
        assert_eq!((status.state.as_str(), status.keys), ("mirrored", 2));
        assert!(conditions::is_true(&status.conditions, READY));
        assert_eq!(d.event_reasons(), ["Updated", "Mirrored"]);
    }

    #[tokio::test]
    async fn a_second_reconcile_writes_nothing() {
        let d = Double::new();
        fixture(&d);
        source(&d, &[("a", "1")]);
        pass(&d, "m").await.unwrap();
        d.clear_writes();
        d.clear_events();
        pass(&d, "m").await.unwrap();
        assert!(d.changes().is_empty(), "{:?}", d.changes());
        // The status was equal, so the run loop did not even call the status writer.
        assert!(d.writes().iter().all(|w| w.verb != Verb::ApplyStatus));
        assert!(d.events().is_empty());
    }

    #[tokio::test]
    async fn missing_source_waits_without_error() {
        let d = Double::new();
        fixture(&d);
        pass(&d, "m").await.unwrap();
        let m: Mirror = d.object(Some("ns"), "m").unwrap();
        let status = m.status.unwrap();
        assert_eq!(status.state, "waiting");
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "SourceMissing")
        );
        assert!(d.object::<ConfigMap>(Some("ns"), "m-mirror").is_none());
    }

    #[tokio::test]
    async fn a_failed_apply_persists_failed_status_and_retries() {
        let d = Double::new();
        fixture(&d);
        source(&d, &[("a", "1")]);
        d.fail_next(Verb::Apply, "ConfigMap", Error::Forbidden("no".into()));
        let err = pass(&d, "m").await.unwrap_err();
        assert!(matches!(
            err,
            kit::run::RunError::Reconcile {
                retry: Retry::Backoff,
                ..
            }
        ));
        let m: Mirror = d.object(Some("ns"), "m").unwrap();
        let status = m.status.unwrap();
        assert_eq!(status.state, "failed");
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!(ready.reason, "ApplyFailed");
        assert!(ready.message.contains("no"));
        assert_eq!(d.event_reasons(), ["ApplyFailed"]);
        // The next attempt recovers.
        pass(&d, "m").await.unwrap();
        let m: Mirror = d.object(Some("ns"), "m").unwrap();
        assert_eq!(m.status.unwrap().state, "mirrored");
    }

    #[tokio::test]
    async fn a_failed_status_write_publishes_no_events() {
        let d = Double::new();
        fixture(&d);
        source(&d, &[("a", "1")]);
        d.fail_next(
            Verb::ApplyStatus,
            "Mirror",
            Error::Conflict("injected".into()),
        );
        let err = pass(&d, "m").await.unwrap_err();
        assert!(matches!(err, kit::run::RunError::Status(_)));
        assert!(d.events().is_empty());
    }
}
