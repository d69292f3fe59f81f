//! rkube in one process: [`cluster`] starts a whole cluster in-process (what `rkube server`
//! and the test-cluster library run), [`server`] is `rkube server`'s command line,
//! [`envtest`] makes rkube a drop-in for controller-runtime's envtest binaries, and [`ctl`]
//! is the cluster CLI (`rkube cluster …`: clusters of detached processes).

pub mod cluster;
pub mod ctl;
pub mod envtest;
pub mod server;

pub use cluster::{Cluster, Options};
