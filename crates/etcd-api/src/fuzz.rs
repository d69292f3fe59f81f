//! Entry point shared by the fuzz target of the etcd JSON codec (`fuzz/`, cargo-fuzz) and the
//! test that replays its committed corpus and crash regressions on every test run: requests
//! as the store decodes them must decode or fail, and what decodes must survive a round trip.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::*;

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<T>(data) {
        let bytes = serde_json::to_vec(&v).expect("what decoded encodes");
        let again: T = serde_json::from_slice(&bytes).expect("what encoded decodes");
        assert_eq!(v, again, "a round trip changed the value");
    }
}

/// etcd v3 JSON requests and responses, and base64.
pub fn etcd_json(data: &[u8]) {
    round_trip::<RangeRequest>(data);
    round_trip::<PutRequest>(data);
    round_trip::<DeleteRangeRequest>(data);
    round_trip::<TxnRequest>(data);
    round_trip::<CompactionRequest>(data);
    round_trip::<LeaseGrantRequest>(data);
    round_trip::<WatchRequest>(data);
    round_trip::<RangeResponse>(data);
    round_trip::<WatchResponse>(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::codec::decode_b64(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_corpus_and_regressions_replay() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut n = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join("etcd_json")) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(data) = std::fs::read(e.path()) else {
                    continue;
                };
                etcd_json(&data);
                n += 1;
            }
        }
        assert!(n > 0, "no committed corpus for etcd_json");
    }
}
