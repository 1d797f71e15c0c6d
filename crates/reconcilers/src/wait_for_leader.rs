//! The wait-for-leader script of multinode workers: one ConfigMap per graph with a multinode
//! component.
//!
//! ConfigMap `<dgd>-wait-leader-script`, owned by the graph, key [`SCRIPT_KEY`]. Worker pods of a
//! multinode vLLM component launched with multiprocessing mount it at [`MOUNT_PATH`] in the
//! init container `wait-for-leader-mp` that runs `python3 /scripts/wait-for-leader.py` with
//! `LEADER_HOST` and `LEADER_PORT` set (`pod_render::multinode::vllm`). The script
//! waits until the leader's pod is Running and not terminating (asked of the Kubernetes API with
//! the pod's service account; when the API cannot be asked, TCP alone decides) and its port
//! accepts connections, reporting progress every 30 seconds. A graph with no multinode component
//! left has its ConfigMap deleted.

use std::sync::Arc;

use api::DynamoGraphDeployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kit::{Event, Reader, Writer};
use kube::ResourceExt;

use crate::child::{self, Ownership};
use crate::error::{Error, Result};
use crate::naming;

/// Key of the script in the ConfigMap, where worker pods mount the ConfigMap and the name of
/// the volume they mount it as (`pod_render::multinode::vllm` renders the mount).
pub use pod_render::multinode::vllm::{
    WAIT_LEADER_MOUNT_PATH as MOUNT_PATH, WAIT_LEADER_SCRIPT_KEY as SCRIPT_KEY,
    WAIT_LEADER_VOLUME as VOLUME_NAME,
};

/// The script: waits for `LEADER_HOST:LEADER_PORT` to serve, checking the leader pod first.
pub const SCRIPT: &str = r#"import json, os, socket, ssl, time, urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
HOST = os.environ["LEADER_HOST"]
PORT = int(os.environ["LEADER_PORT"])


def leader_pod():
    """(healthy, reason, ip): the leader's pod must be Running and not terminating."""
    try:
        ip = socket.gethostbyname(HOST)
    except socket.gaierror:
        return False, "DNS resolution failed", None
    try:
        ns = open(f"{SA}/namespace").read().strip()
        token = open(f"{SA}/token").read().strip()
        url = f"https://kubernetes.default.svc/api/v1/namespaces/{ns}/pods?fieldSelector=status.podIP={ip}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
        pods = json.loads(urllib.request.urlopen(req, context=ctx, timeout=5).read()).get("items", [])
    except Exception as e:  # no API access (e.g. no RBAC): TCP alone decides
        return True, f"Kubernetes API unavailable ({e})", ip
    if not pods:
        return False, f"no pod with IP {ip}", ip
    meta, status = pods[0].get("metadata", {}), pods[0].get("status", {})
    name = meta.get("name", "unknown")
    if meta.get("deletionTimestamp"):
        return False, f"pod {name} is terminating", ip
    if status.get("phase") != "Running":
        return False, f"pod {name} is {status.get('phase')}", ip
    return True, "", ip


print(f"Waiting for leader at {HOST}:{PORT}...", flush=True)
start = last_report = time.monotonic()
last = ""
while True:
    healthy, reason, ip = leader_pod()
    if healthy:
        try:
            socket.create_connection((ip, PORT), timeout=2).close()
            print(f"Leader ready after {time.monotonic() - start:.1f}s", flush=True)
            break
        except OSError as e:
            last = f"tcp: {type(e).__name__}: {e}"
    else:
        last = reason
    now = time.monotonic()
    if now - last_report >= 30:
        print(f"Still waiting for {HOST}:{PORT} ({now - start:.0f}s, last: {last})", flush=True)
        last_report = now
    time.sleep(5)
"#;

/// Ensures the wait-for-leader ConfigMap of graphs with a multinode component.
pub struct WaitForLeaderReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl WaitForLeaderReconciler {
    /// A reconciler reading through `reader` and writing through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Self { reader, writer }
    }

    /// Ensure the ConfigMap when any component is multinode; delete it when none is.
    /// Returns the step's events, also those of the writes made before a failure.
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<(), Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        kit::Step::new(result, events)
    }

    async fn converge(&self, dgd: &DynamoGraphDeployment, events: &mut Vec<Event>) -> Result<()> {
        if !dgd.spec.has_multinode_component() {
            let name = naming::wait_leader_config_map_name(&dgd.name_any());
            return child::prune::<ConfigMap>(&*self.reader, &*self.writer, dgd, &name, events)
                .await;
        }
        let cm = render(dgd)?;
        let e = child::ensure(
            &*self.reader,
            &*self.writer,
            &cm,
            Ownership::ControlledBy(dgd),
        )
        .await?;
        child::record(
            events,
            e,
            "ConfigMap",
            dgd.namespace().as_deref(),
            &cm.name_any(),
        );
        Ok(())
    }
}

/// The ConfigMap of `dgd`.
pub fn render(dgd: &DynamoGraphDeployment) -> Result<ConfigMap> {
    let name = dgd.name_any();
    Ok(ConfigMap {
        metadata: child::owned_meta(
            dgd,
            naming::wait_leader_config_map_name(&name),
            naming::graph_labels(&name),
        )?,
        data: Some([(SCRIPT_KEY.to_string(), SCRIPT.to_string())].into()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::ComponentType;
    use api::common::MultinodeSpec;
    use kit::testing::{Double, Verb};

    fn multinode(d: &Double) -> DynamoGraphDeployment {
        let mut w = component("W", ComponentType::Worker);
        w.multinode = Some(MultinodeSpec { node_count: 2 });
        d.insert(dgd("g", vec![w]))
    }

    #[tokio::test]
    async fn created_for_multinode_then_nothing_and_drift_restored() {
        let d = Double::new();
        let g = multinode(&d);
        let r = WaitForLeaderReconciler::new(d.reader(), d.writer());
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ConfigMapCreated"]);
        let cm: ConfigMap = d.object(Some("ns"), "g-wait-leader-script").unwrap();
        assert!(cm.data.as_ref().unwrap()[SCRIPT_KEY].contains("LEADER_PORT"));
        assert!(child::is_controlled_by(&cm.metadata, &g));

        d.clear_writes();
        r.reconcile(&g).await.result.unwrap();
        assert!(d.writes().is_empty());

        let mut edited = cm.clone();
        edited.data = Some([(SCRIPT_KEY.to_string(), "print('hi')".to_string())].into());
        d.insert(edited);
        let mut events = Vec::new();
        r.reconcile(&g).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ConfigMapUpdated"]);
        let cm: ConfigMap = d.object(Some("ns"), "g-wait-leader-script").unwrap();
        assert_eq!(cm.data.unwrap()[SCRIPT_KEY], SCRIPT);
    }

    #[tokio::test]
    async fn deleted_when_no_component_is_multinode_any_more() {
        let d = Double::new();
        let g = multinode(&d);
        let r = WaitForLeaderReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        let mut single = g.clone();
        single.spec.components[0].multinode = None;
        let mut events = Vec::new();
        r.reconcile(&single).await.events_into(&mut events).unwrap();
        assert_eq!(reasons(&events), ["ConfigMapDeleted"]);
        assert!(
            d.object::<ConfigMap>(Some("ns"), "g-wait-leader-script")
                .is_none()
        );
        d.clear_writes();
        r.reconcile(&single).await.result.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
    }

    #[tokio::test]
    async fn single_node_graphs_get_none_and_failures_surface() {
        let d = Double::new();
        let g = d.insert(dgd("g", vec![component("W", ComponentType::Worker)]));
        let r = WaitForLeaderReconciler::new(d.reader(), d.writer());
        r.reconcile(&g).await.result.unwrap();
        assert!(d.writes().is_empty());

        let g = multinode(&d);
        d.fail_next(Verb::Apply, "ConfigMap", kit::Error::Invalid("bad".into()));
        let err = r.reconcile(&g).await.result.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("apply ConfigMap ns/g-wait-leader-script")
        );
    }
}
