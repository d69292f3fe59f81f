//! End-to-end tests on the real binaries as processes (see `rkube_e2e::Cluster`).

mod builtin;
mod cli;
mod compose;
mod crds;
mod flows;
mod hostile;
mod kubectl;
mod onebinary;
mod resilience;
mod streaming;
mod ui;
mod workloads;
