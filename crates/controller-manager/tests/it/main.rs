//! Component tests of the controller-manager (and of rkube-client's Reflector) against an
//! in-process store and apiserver.

mod batch;
mod client;
mod disruption;
mod flows;
mod harness;
mod nodes;
mod services;
mod volumes;
