//! DynamoCheckpoint controller: the create-or-reuse state machine for checkpoint Jobs.
