//! DynamoComponentDeployment controller: renders Deployments and Services.
