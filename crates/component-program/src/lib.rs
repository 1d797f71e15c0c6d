//! The component workload program: one DynamoComponentDeployment per component.
