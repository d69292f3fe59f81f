//! rkube-store's integration tests: one binary so the child servers are built and found once.
//!
//! `conformance` runs the same assertions against rkube-store and against a real etcd 3.4
//! (each case becomes `<case>_rkube` and `<case>_etcd`); etcd's observed behaviour is the oracle.
//! `crash` kills rkube-store with SIGKILL under write load and checks no acknowledged write
//! is lost. `etcdctl` runs Debian's etcdctl against both servers.
//! The etcd variants fail when no `etcd` binary is on PATH, unless `RKUBE_SKIP_ETCD=1`.

mod conformance;
mod crash;
mod etcdctl;
mod harness;
mod slow;
