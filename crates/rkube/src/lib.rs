//! rkube in one process: [`cluster`] starts a whole cluster in-process (what `rkube server`
//! and the test-cluster library run), [`server`] is `rkube server`'s command line, and
//! [`envtest`] makes rkube a drop-in for controller-runtime's envtest binaries.

pub mod cluster;
pub mod envtest;
pub mod server;

pub use cluster::{Cluster, Options};
