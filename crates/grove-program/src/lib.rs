//! The grove workload program: one Grove PodCliqueSet per graph.
