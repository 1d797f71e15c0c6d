//! Fixtures of the unit tests.
