//! Component tests of the scheduler against an in-process store and apiserver.

mod harness;
mod scheduling;
