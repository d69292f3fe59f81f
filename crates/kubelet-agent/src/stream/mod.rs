//! The wire protocols of kubectl's streaming commands, as the agent's server speaks them:
//! WebSocket framing (`websocket`) and SPDY/3.1 framing with its header compression (`spdy`).

pub mod spdy;
pub mod websocket;
