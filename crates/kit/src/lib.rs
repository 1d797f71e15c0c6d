//! Reusable reconcile framework: capabilities, outcome, events, conditions, apply.
