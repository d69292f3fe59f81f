//! The client's one error type: an API `Status`, a transport failure, or an undecodable body.

use rkube_api::status::{ApiError, Status, StatusListMeta};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiserver answered with a `Status` failure (404, 409, 410, 422, …).
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The request never got an answer (connection refused, reset, timeout).
    #[error("transport: {0}")]
    Transport(String),
    /// An answer arrived but could not be decoded.
    #[error("decode: {0}")]
    Decode(String),
    #[error("config: {0}")]
    Config(String),
    /// Leadership was lost (renewal failed past the renew deadline).
    #[error("leader election lost")]
    LeaderLost,
}

impl Error {
    /// The HTTP code of an API error, if this is one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.code()),
            _ => None,
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Error::Api(e) => e.reason(),
            _ => "",
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409) && self.reason() == "Conflict"
    }

    pub fn is_already_exists(&self) -> bool {
        self.code() == Some(409) && self.reason() == "AlreadyExists"
    }

    /// 410 Gone: the resourceVersion asked for has left the server's history.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }

    /// 504 "Too large resource version": the server has not caught up with the RV asked for.
    pub fn is_too_large_rv(&self) -> bool {
        self.code() == Some(504) && self.to_string().contains("Too large resource version")
    }

    /// Builds an error from a non-2xx reply: the `Status` body when there is one.
    pub(crate) fn from_reply(code: u16, body: &[u8]) -> Self {
        if let Ok(s) = serde_json::from_slice::<Status>(body) {
            if s.kind == "Status" {
                return Error::Api(ApiError(Box::new(s)));
            }
        }
        let message = String::from_utf8_lossy(body).trim().to_string();
        Error::Api(ApiError(Box::new(Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: StatusListMeta::default(),
            status: "Failure".into(),
            message: if message.is_empty() {
                format!("the server answered {code}")
            } else {
                message
            },
            reason: String::new(),
            details: None,
            code,
        })))
    }

    pub(crate) fn from_status(s: Status) -> Self {
        Error::Api(ApiError(Box::new(s)))
    }
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Self {
        Error::Transport(error_chain(&e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
