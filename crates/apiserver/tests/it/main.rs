//! rkube-apiserver component tests: an in-process apiserver on rkube-store (in-process) and on
//! a real etcd 3.4 (child process); every case runs on both (`<case>_rkube`, `<case>_etcd`).

mod admission;
mod api;
mod auth;
mod crds;
mod harness;
mod kinds;
mod services;
mod tls;
mod tokens;
mod watch;
mod webhooks;
