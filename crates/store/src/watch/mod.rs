//! Watches: the hub that fans committed changes out to watchers (`hub`) and the event
//! encoding (`event`). The `/v3/watch` endpoint that feeds them is `crate::watch_stream`.

pub mod event;
pub mod hub;
