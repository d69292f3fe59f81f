//! Watches: the hub that fans committed changes out to watchers (`hub`), the per-stream HTTP
//! handler for `/v3/watch` (`stream`), and the event encoding shared by both (`event`).

pub mod event;
pub mod hub;
pub mod stream;
