//! What the adapter sees of a workload, whichever pathway runs it.

/// One workload of a component: a DynamoComponentDeployment, a PodClique or a
/// PodCliqueScalingGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its kind.
    pub kind: &'static str,
    /// Its name (in the adapter's namespace).
    pub name: String,
    /// Its `spec.replicas`; `None` when unset.
    pub replicas: Option<i32>,
    /// Its current replicas (`status`), 0 when not reported.
    pub current: i32,
    /// Whether its controller has observed its latest generation.
    pub observed: bool,
}

impl Workload {
    /// Whether it carries `replicas` and runs that many, as observed by its controller.
    pub fn settled(&self, replicas: i32) -> bool {
        self.replicas == Some(replicas) && self.observed && self.current == replicas
    }
}

/// What a scale write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaled {
    /// The count changed.
    Changed,
    /// It already had the count (a no-op write).
    Unchanged,
    /// The workload no longer exists.
    Gone,
}
