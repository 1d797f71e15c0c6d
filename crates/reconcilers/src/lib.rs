//! Concrete shared DynamoGraphDeployment reconcilers, one module per resource family.
