//! Component tests of the kubelet-agent against an in-process store and apiserver: a running
//! pod's status field by field, graceful deletion, logs through the apiserver (and `kubectl logs
//! -f`), and a hundred simulated nodes in one process.

mod agent;
mod harness;
