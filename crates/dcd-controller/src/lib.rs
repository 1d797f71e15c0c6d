//! DynamoComponentDeployment controller: renders each DCD to a Deployment and a Service (a
//! LeaderWorkerSet for multinode components) and, with `modelRef`, its share of the headless
//! model Service, converges them by server-side apply, and reports the DCD status.
//!
//! # Structure
//! - [`render()`] (pure, no I/O): the objects a DCD wants ([`Rendered`]).
//! - [`DcdReconciler`]: `new(reader, writer)` (then `with_infrastructure`,
//!   `with_leader_worker_set`, `with_pull_secret_discovery`), `reconcile(&dcd)` →
//!   [`kit::Reconciled`] with the complete [`api::DynamoComponentDeploymentStatus`]. The top
//!   level (the operator's [`kit::run::Runner`], or [`kit::run::finish`] in tests) persists it
//!   and publishes the queued events.
//! - [`watches`]: what the controller watches and which changes matter.
//!
//! # Reconcile
//! 1. Being deleted: nothing (garbage collection removes the children; no finalizer).
//! 2. [`api::validate::validate_dcd`]: on violations `Available=False`, reason `InvalidSpec`,
//!    the violations as message, a `Warning` event, no child touched, no retry until the DCD
//!    changes. Fields only the Grove pathway renders (`providerOverride`,
//!    `roles[].providerOverride`, `minAvailable`, `topologyConstraint`,
//!    `experimental.grove.forceScalingGroup`) are among the violations, never ignored.
//! 3. With `experimental.checkpoint.enabled`, the component's checkpoint
//!    (`reconcilers::checkpoints::resolve_component`): the DynamoCheckpoint `checkpointRef`
//!    names (the graph names its resolved checkpoint so), else the one of `identity`, else none
//!    yet; a Ready one of a `WaitForCheckpoint` component with the snapshot agent's storage. A
//!    missing referenced checkpoint or agent: `Available=False`, reason `CheckpointUnresolved`,
//!    nothing touched, retried.
//! 4. The workload. Single node: the Deployment `<dcd>`. Multinode: the LeaderWorkerSet
//!    `<dcd>-0` while the cluster serves `leaderworkerset.x-k8s.io/v1` (the operator's shared
//!    served set, [`DcdReconciler::with_served`], read at every reconcile); otherwise
//!    `Available=False`, reason `LeaderWorkerSetUnavailable`, one `Warning` event, and nothing
//!    is touched (no workload, no Service) until the DCD changes or the API is installed (the
//!    operator re-queues multinode DCDs when the LeaderWorkerSet CRD comes or goes). The
//!    LeaderWorkerSet is watched by the operator ([`LeaderWorkerSet`], label-selected by
//!    `nvidia.com/dynamo-component`): a change of its generation (a user's edit) restores the
//!    fields this controller applies, a change of its status updates the DCD's.
//! 5. The Service: applied when wanted, deleted (uid precondition) when not wanted and
//!    controlled by this DCD.
//! 6. The headless model Service of `modelRef` (`reconcilers::model_service`, the step the
//!    Grove pathway runs too): `dynamo-model-<hash>`, shared by every DCD of the namespace
//!    serving the model, each holding a non-controller owner reference and applying under a
//!    field manager of its own; a DCD whose `modelRef` is removed or changed gives its part up,
//!    and the last owner deletes it. A failure: `Available=False`, reason `ServiceSyncFailed`.
//! 7. Status: `Available` (`DeploymentReady|DeploymentNotReady|LeaderWorkerSetReady|
//!    LeaderWorkerSetNotReady`), `DynamoComponentReady` (`ComponentReady|ComponentNotReady`),
//!    `component` (`componentKind`, `componentNames`, `runtimeNamespace`, `replicas`,
//!    `updatedReplicas`, `readyReplicas`, `availableReplicas`, `gpusPerEngine`,
//!    `gpusPerReplica`), `observedGeneration`.
//!
//! Children are written by server-side apply under the field manager [`FIELD_MANAGER`], with a
//! controller owner reference to the DCD. A child of the same name controlled by another
//! object is never taken over: `Available=False`, reason `OwnershipConflict`. A failed read or
//! write sets `Available=False` with the step's reason (`DeploymentSyncFailed`,
//! `LeaderWorkerSetSyncFailed`, `ServiceSyncFailed`) and the error as message, queues a
//! `Warning` event, keeps the rest of the previous status, and retries with backoff. The model
//! Service is the exception to the controller reference: it is shared, never a conflict.
//!
//! **No-op reconciles send nothing.** Each child carries `nvidia.com/last-applied-hash` (the
//! hash of the applied body, as upstream's operator does); the apply is skipped when the live
//! object carries that hash and holds every applied field with the same value (the rule of
//! `kit::child`). Drift of an owned field breaks that and is restored; a changed desired body
//! changes the hash. A child of the DCD's name without a controller is adopted.
//!
//! **Events.** `DeploymentCreated`, `DeploymentUpdated`, `ServiceCreated`, `ServiceUpdated`,
//! `ServiceDeleted` (the component Service and the model Service), `LeaderWorkerSetCreated`,
//! `LeaderWorkerSetUpdated`: only when the write changed something; two or more of one reconcile
//! are published as one `ResourcesCreated` (`ResourcesUpdated`, ...) naming each
//! (`kit::summarize`). `Available` transitions are announced once (its reason as event reason);
//! a component's first status is not a transition (the graph's `Ready` announces its components
//! becoming available), except `LeaderWorkerSetUnavailable` (a Warning). Nor is a graph's
//! component becoming available for the first time: a first status that finds the workload still
//! starting dates `Available=False` (and `DynamoComponentReady=False`) from the component's
//! `creationTimestamp`, unavailable since its creation, and the `DeploymentReady`
//! (`LeaderWorkerSetReady`) that ends it is not announced; becoming available again after a loss
//! or a failure is, and so is a DCD no graph controls. A new component's first
//! status waits up to [`FIRST_STATUS_GRACE`] (30 s) for its workload, so one that starts
//! promptly writes it once; while it keeps starting, its progress is written at most once per
//! `kit::run::SETTLING_INTERVAL`. Upstream's per-reconcile `Reconciling`, `Update` and
//! `UpdateDynamoGraphDeployment` events are not emitted.
//!
//! # Readiness
//! A Deployment is ready exactly as upstream's `IsDeploymentReady`: not paused; desired
//! replicas (`spec.replicas`, default 1) of 0 is ready; otherwise `status.observedGeneration ≥
//! metadata.generation`, `updatedReplicas ≥ desired`, `availableReplicas ≥ desired`,
//! `status.replicas == desired` (no surge pods left), and the `Available` condition `True`. A
//! LeaderWorkerSet is ready exactly as upstream's `IsLeaderWorkerSetReady`: 0 desired replicas
//! (`spec.replicas`, default 1), or `readyReplicas ≥ desired` and its first `Available` condition
//! `True` (its status has no `observedGeneration`); its `status.component` carries `replicas`,
//! `updatedReplicas` and `readyReplicas` (no `availableReplicas`), as upstream reports them. The DCD is ready (`DynamoComponentDeployment::is_ready`) when
//! `observedGeneration ≥ generation` and `Available=True`.
//!
//! # Replica ownership
//! The applied workload carries the DCD's `spec.replicas` whenever the DCD sets it, whoever set
//! it: the graph, or (for a component with `scalingAdapter`) the scaling adapter's controller,
//! which owns that DCD field. A foreign edit of the workload's replicas (`kubectl edit`,
//! `kubectl scale deployment`) changes its generation, triggers this controller and is
//! restored once. An unset count is left out of the applied configuration, so server-side
//! apply keeps whatever another manager set and a new Deployment starts with the API default of
//! 1; except that a component with `scalingAdapter` whose DCD count is unset (the adapter has
//! not written it yet) keeps the live workload's count ([`held_replicas`]), so enabling an
//! adapter never drops a running component to 1. (Upstream always writes the DCD's value, or
//! `nil`, which resets a foreign scale; see [`applied_replicas`].)
//!
//! # What is rendered
//! **Deployment** `<dcd>`: labels = the DCD's labels, the pod template's labels,
//! `nvidia.com/dynamo-sub-component-type: prefill|decode` on prefill and decode components (their
//! v1alpha1 sub-type, over any label of that name), and `nvidia.com/dynamo-component`,
//! `nvidia.com/dynamo-namespace` (the DCD's own values of those, of the graph name, worker hash
//! and component class win; `nvidia.com/dynamo-component-class: worker` is what the graph puts
//! on the worker, prefill and decode DCDs of a graph with an EPP component and on their pod
//! templates, so it reaches the Deployment, the pods and the Service), and with `modelRef`
//! `nvidia.com/dynamo-base-model-hash` (8 hex digits of SHA-256 of the model name, over a pod
//! template label of that name); annotations = the pod template's (without
//! `nvidia.com/dynamo-operator-origin-version`; topology annotations come from the DCD), with
//! `modelRef` `nvidia.com/dynamo-base-model` (the name) (upstream's `GetDCDKubeLabels` /
//! `GetDCDKubeAnnotations`); selector `nvidia.com/selector=<dcd>`; strategy `RollingUpdate` with `maxSurge` /
//! `maxUnavailable` 25% or `nvidia.com/deployment-rolling-update-max-surge|-max-unavailable`,
//! or `Recreate` with `nvidia.com/deployment-strategy: Recreate` (`api::deployment_strategy`, the
//! reading the graph's rollout of worker generations uses too).
//!
//! **Pod template**: the same labels plus `nvidia.com/selector`,
//! `nvidia.com/dynamo-graph-deployment-name`, `nvidia.com/dynamo-component-type`,
//! `nvidia.com/metrics-enabled: "true"` (unless `nvidia.com/enable-metrics: "false"`), and with
//! Kubernetes discovery `nvidia.com/dynamo-discovery-backend: kubernetes`,
//! `nvidia.com/dynamo-discovery-enabled: "true"` (the base-model label and annotation as on the
//! Deployment: the model Service selects the pods by the hash). Pod spec:
//! `terminationGracePeriodSeconds: 60`, `restartPolicy: Always`, `securityContext.fsGroup: 1000`
//! unless the user sets a security context; ServiceAccount: the user's, else
//! `planner-serviceaccount` for planners (`epp-serviceaccount` for the EPP), else
//! `<dgd>-k8s-service-discovery` with Kubernetes discovery, else the first by name of the
//! namespace's ServiceAccounts labelled `nvidia.com/dynamo-component-pod: "true"` (read from the
//! watch cache; upstream takes the first of its cache's list, in no stable order, so with two
//! such accounts its pods can change account between reconciles), else `default`
//! ([`component_pod_account`]); the user's pod spec wins field by field. The `main` container is the operator default for the component type
//! with the user's `main` merged over it: every field the user sets wins (command and args are kept
//! from the user, lists replace lists, a user probe replaces the default probe), env vars merge by
//! name (user wins) sorted by name; other containers are sidecars, kept as written. `/dev/shm`:
//! volume `shared-memory` (emptyDir, medium Memory, size `sharedMemorySize` or 8Gi; none when it is
//! `0`) mounted on `main`.
//!
//! | type | command / args | ports | probes | env (besides the common env) |
//! | --- | --- | --- | --- | --- |
//! | all | `/bin/sh -c` | | | `DYN_NAMESPACE`, `DYN_COMPONENT` (the type), `DYN_PARENT_DGD_K8S_NAME`, `DYN_PARENT_DGD_K8S_NAMESPACE`, `POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `DYN_DISCOVERY_BACKEND=kubernetes` (unless etcd), `CONTAINER_NAME`/`DYN_KUBE_DISCOVERY_MODE` in container discovery mode |
//! | frontend | `python3 -m dynamo.frontend` | `http` 8000 | liveness `/live` (15 s delay, 10 s period, 1 s timeout, 3 failures), readiness `/health` (10/10/3/3) on `http` | `DYNAMO_PORT`, `DYN_HTTP_PORT` = 8000, `DYN_NAMESPACE_PREFIX` |
//! | worker, prefill, decode | | `system` 9090, `nixl` 19090 | liveness `/live` (5 s, 4 s, 1), readiness `/health` (10 s, 4 s, 3), startup `/live` (10 s, 5 s, 720) on `system` | `DYN_SYSTEM_ENABLED`, `DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS`, `DYN_SYSTEM_PORT`, `DYN_HEALTH_CHECK_ENABLED=false`, `NIXL_TELEMETRY_*`, `DYN_FORWARDPASS_METRIC_PORT=20380` (forward-pass metrics base port; env only, no container port), `DYN_NAMESPACE_WORKER_SUFFIX` (worker hash) |
//! | planner | | `metrics` 9085, `system` 9090 | as workers | `PLANNER_PROMETHEUS_PORT`, `DYN_SYSTEM_PORT` |
//! | epp | none (the image's entrypoint); with `eppConfig` (legacy Go EPP) the pool, gRPC and `--config-file` flags | `grpc` 9002, `grpc-health` 9003, `metrics` 9090 | gRPC on 9003, service `inference-extension`: liveness and readiness (5 s delay, 10 s period), startup (10 s period, 180 failures) | `USE_STREAMING`, `RUST_LOG=info`, `DYN_ENFORCE_DISAGG=false`, `DYN_NAMESPACE_PREFIX`; `HOME=/home/dynamo` for the native EPP |
//!
//! The pod itself is rendered by `pod-render`, the same function the Grove pathway calls (see
//! its docs for the compilation cache, the EPP's volumes, service account and grace period,
//! and `frontendSidecar`), for the DCD's Dynamo runtime version (`runtimeVersionOverride`, else
//! the runtime image's tag): from 1.5 workers get `DYN_HEALTH_CHECK_ENABLED=true` and three
//! liveness failures, from 1.6 frontends a startup probe and, with the native EPP,
//! `DYN_NAMESPACE_PREFIX_STRICT=true` (`pod_render::gates`; the conformance images are older or
//! untagged, so none applies to them). With `dynamoSidecar`, the named native sidecar runs the
//! Dynamo runtime (system port, probes, Dynamo env) and `main` is the engine as the user wrote
//! it, with the graph's env, the compilation cache and `/dev/shm` only.
//!
//! **Image pull secrets** (with discovery on, [`DcdReconciler::with_pull_secret_discovery`];
//! the operator's `--discover-image-pull-secrets`): the DCD's namespace's
//! `kubernetes.io/dockerconfigjson` Secrets for the registries of the pod's container and init
//! container images, after the user's `imagePullSecrets`, unless the pod template annotation
//! `nvidia.com/disable-image-pull-secret-discovery` is `"true"` (`reconcilers::pull_secrets`
//! reads them from the watch cache, `pod_render::pull_secrets` attaches them). A failed read of
//! the Secrets is reported as a failure of the workload step (`DeploymentSyncFailed` or
//! `LeaderWorkerSetSyncFailed`) and nothing is applied.
//!
//! **GPU memory service** (`experimental.gpuMemoryService`, intra-pod; `pod_render::gms`):
//! `main`'s GPUs become the pod claim `intrapod-shared-gpu` on the graph's ResourceClaimTemplate
//! `<graph>-<component lowercased>-gpu`, with the `nvidia.com/gpu` toleration, the `gms-server`
//! native sidecar and the `gms-intrapod-control` socket volume on every client
//! (`extraClientContainers` too). **Intra-pod failover** (`experimental.failover`, vLLM;
//! `pod_render::failover`): `main` becomes `engine-0` and `engine-1` (ports `system-0`/`system-1`
//! 9090/9091, probes on them, failover and vLLM env). `gpusPerReplica` counts a GMS pod's claimed
//! GPUs once. Validation refuses inter-pod mode, GMS without GPUs on `main`, GMS on a DCD that
//! belongs to no graph (nothing creates its template) and failover on other backends.
//!
//! **Checkpoint restore** (`experimental.checkpoint`; `pod_render::restore`, as on the Grove
//! pathway): a `WaitForCheckpoint` component whose checkpoint is Ready restores its pods from
//! it: labels `nvidia.com/snapshot-is-restore-target` and `nvidia.com/snapshot-checkpoint-id`,
//! annotations `nvidia.com/snapshot-artifact-version` and
//! `nvidia.com/snapshot-target-containers`; the localhost seccomp profile
//! `profiles/block-iouring.json`; the snapshot agent's PVC as `checkpoint-storage` mounted on
//! every target at the agent's base path; the `snapshot-control` emptyDir (`subPath` the target)
//! with `DYN_SNAPSHOT_CONTROL_DIR`; `sleep infinity` without args and a startup probe polling the
//! restore; the `podinfo` Downward API volume at `/etc/podinfo`. The targets are
//! `targetContainerName` (default `main`), or `engine-0` and `engine-1` with intra-pod failover.
//! An `Immediate` component's template carries the restore-candidate annotations once its
//! checkpoint exists and never changes with its readiness; the operator's pod-create webhook
//! (`operator::restore_webhook`) restore-shapes each pod created while the checkpoint is Ready.
//! (Held at zero replicas while waiting: the graph sets the DCD's replicas.)
//!
//! **Service** (normalized `<dcd>`: lowercase, dots as dashes): with Kubernetes discovery (the
//! default; off when `nvidia.com/dynamo-discovery-backend` names another backend) or for a
//! frontend. Labels as the Deployment (so the sub-component type, component class and base-model
//! hash too; a
//! `nvidia.com/dynamo-component-type` label only when the DCD carries one, as upstream's
//! Service copies the DCD's labels) plus the discovery labels, the same annotations, selector
//! `nvidia.com/dynamo-component-type`, `nvidia.com/dynamo-namespace`,
//! `nvidia.com/dynamo-component` (plus `role: leader` when multinode); port `http` 8000 →
//! `http` for frontends, `grpc` 9002 (appProtocol http2) for epp, else `system` 9090 →
//! `system`.
//!
//! **LeaderWorkerSet** `<dcd>-0`: `replicas` (same ownership rule), `startupPolicy:
//! LeaderCreated`, `size` = nodeCount, leader and worker templates as above with label
//! `role: leader|worker` and without `nvidia.com/selector`, each with the backend's multinode
//! launch wiring for its role (`pod_render::multinode`, the leader found at
//! `$(LWS_LEADER_ADDRESS)`, a worker's rank `$(LWS_WORKER_INDEX)`): SGLang's
//! `--dist-init-addr $(LWS_LEADER_ADDRESS):29500 --nnodes <n> --node-rank <rank>`; vLLM's Ray
//! cluster (leader `ray start --head --port=6379 && <engine> --distributed-executor-backend
//! ray`, workers `ray start --address=$(LWS_LEADER_ADDRESS):6379 --block`), multiprocessing
//! (with the graph's `wait-for-leader-mp` init container on the workers), data-parallel or
//! elastic-EP flags; TensorRT-LLM's `mpirun` over SSH from the leader (the MPI SSH key Secret
//! `mpi-run-ssh-secret` at `/ssh-pk`, after waiting for the workers' DNS names) and `sshd` on
//! the workers. Worker pods of SGLang and vLLM have no probes; TensorRT-LLM workers are ready
//! when their SSH port is.
//!
//! **Model Service** (with `modelRef`): `dynamo-model-<hash>`, headless (`clusterIP: None`),
//! labels `nvidia.com/dynamo-base-model-hash` and `nvidia.com/managed-by: dynamo-operator`,
//! annotation `nvidia.com/dynamo-base-model`, selector the hash label, port `system` 9090 →
//! 9090, `publishNotReadyAddresses: false`; one per model and namespace, shared with every DCD
//! and graph serving the model (see `reconcilers::model_service` for the ownership rule, which
//! differs from upstream's first-owner controller reference).
//!
//! The Dynamo namespace is the DCD's `nvidia.com/dynamo-namespace` label, else
//! `<namespace>-<graph>` (`dynamo` with `globalDynamoNamespace`), the graph being the DCD's
//! `nvidia.com/dynamo-graph-deployment-name` label or its DynamoGraphDeployment owner (the DCD
//! name for a standalone DCD). A prefill/decode DCD that the graph labelled with alpha-era
//! worker selectors (component type `worker` with a worker hash) keeps rendering type `worker`
//! (its sub-component-type label names the real type).
//!
//! # Not rendered (yet)
//! Every field of a component's pod is rendered or refused (`api`'s field-coverage test walks
//! the schema). Upstream also has, outside the pod: inputs of its operator configuration file
//! (TLS env of the infrastructure endpoints, checkpoint storage configured rather than
//! discovered from the snapshot agent's DaemonSet), and
//! what it does to graphs an older upstream operator made (legacy per-replica
//! LeaderWorkerSet/PodGroup pruning, the Deployment lookups that keep alpha-era selectors, HPA
//! ownership).

pub mod lws;
pub mod render;
pub mod status;
pub mod watches;

#[cfg(test)]
mod fixtures;
mod reconcile;

pub use api::labels::LAST_APPLIED_HASH;
pub use lws::LeaderWorkerSet;
pub use reconcile::{
    Child, DcdReconciler, Error, FIELD_MANAGER, REASON_CHECKPOINT_UNRESOLVED,
    REASON_DEPLOYMENT_SYNC_FAILED, REASON_LEADER_WORKER_SET_SYNC_FAILED, REASON_OWNERSHIP_CONFLICT,
    REASON_SERVICE_SYNC_FAILED,
};
pub use render::{
    Rendered, Workload, applied_replicas, component_pod_account, held_replicas, hold_replicas,
    render, render_with,
};
pub use status::{deployment_ready, leader_worker_set_ready};

/// How long a new component's first status waits for its workload to become ready (the
/// operator's [`kit::run::Runner::first_status_grace`] for DCDs): three times a graph's
/// [`kit::run::FIRST_STATUS_GRACE`], since the component's graph reports it meanwhile. A
/// component whose pods start within it writes one status, not a starting one and then ready.
pub const FIRST_STATUS_GRACE: std::time::Duration = std::time::Duration::from_secs(30);
