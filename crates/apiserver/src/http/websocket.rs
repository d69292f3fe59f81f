//! Watches over WebSocket, as browsers open them (a browser holds at most six HTTP/1.1
//! connections to a host, fewer than a page watching eight resources needs) and as upstream
//! serves them: a `GET …?watch=1` with `Upgrade: websocket` passes the same chain, and each
//! watch event goes out as one text message holding the event's JSON. What the client sends
//! is ignored except a close; the first subprotocol it offers is echoed, as upstream's
//! handshake does (a browser that offered one fails a handshake that names none). A browser
//! opens a WebSocket to any site without CORS, so an upgrade whose `Origin` is not this
//! server is refused: another site's page must not read watches with what the browser holds.

use std::pin::pin;
use std::time::Duration;

use axum::extract::ws::{Message, Utf8Bytes, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use rkube_api::ApiError;

/// A request to upgrade to WebSocket (`Upgrade: websocket`).
pub fn is_request(headers: &HeaderMap) -> bool {
    super::header(headers, "upgrade").eq_ignore_ascii_case("websocket")
}

/// 403 for a request a browser sent from another site's page: an `Origin` that is not
/// `http(s)://<Host>`. Clients other than browsers send none.
pub fn check_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get("origin") else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let host = super::header(headers, "host");
    let own = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|authority| !host.is_empty() && authority == host);
    match own {
        true => Ok(()),
        false => Err(ApiError::forbidden_path(format!(
            "a request from another site ({origin}) is refused"
        ))),
    }
}

/// The handshake's checks (GET, version 13, a key, `Connection: upgrade`) as a 400 when one
/// fails; a cross-site upgrade is 403.
pub async fn upgrade(parts: &mut Parts) -> Result<WebSocketUpgrade, ApiError> {
    check_origin(&parts.headers)?;
    let offered = super::header(&parts.headers, "sec-websocket-protocol")
        .split(',')
        .map(str::trim)
        .find(|p| !p.is_empty())
        .map(String::from);
    let ws = WebSocketUpgrade::from_request_parts(parts, &())
        .await
        .map_err(|r| ApiError::bad_request(format!("websocket upgrade: {r}")))?
        // What the client sends is ignored: nothing large is buffered for it.
        .max_message_size(MAX_RECEIVED)
        .max_frame_size(MAX_RECEIVED);
    Ok(match offered {
        Some(p) => ws.protocols([p]),
        None => ws,
    })
}

/// The largest message or frame read from a client (close frames and pings are small).
const MAX_RECEIVED: usize = 4096;

/// A message the client has not taken in this long ends the connection (a frozen tab, a
/// vanished peer): nothing waits on a send for ever.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers the upgrade, then sends each line of `lines` as a text message until the lines end
/// (the watch's deadline, shutdown, a dropped slow watcher), the client goes away, or a send
/// takes longer than `SEND_TIMEOUT`.
pub fn send_lines<S>(ws: WebSocketUpgrade, lines: S) -> Response
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    ws.on_upgrade(move |mut socket| async move {
        let mut lines = pin!(lines);
        loop {
            tokio::select! {
                line = lines.next() => {
                    let Some(Ok(line)) = line else { break };
                    let Ok(text) = Utf8Bytes::try_from(line) else { break };
                    let sent = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text))).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        return;
                    }
                }
                received = socket.recv() => match received {
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => {}
                },
            }
        }
        let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(None))).await;
    })
}
