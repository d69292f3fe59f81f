//! rkube-testcluster's tests: in-process clusters started, used with kube-rs and kubectl,
//! run side by side, and torn down; and a kube-rs operator tested against one.

mod cluster;
mod operator;
