//! The DynamoGraphDeployment composition root: select a program, persist status, emit events.
