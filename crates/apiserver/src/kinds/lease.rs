//! Leases (`coordination.k8s.io`): a PUT may create one (node heartbeats, leader election);
//! kubectl shows the holder.

use rkube_api::k8s::api::coordination::v1 as coordination;
use rkube_api::meta;
use serde_json::{json, Value};

use super::print::{self, s, Column};
use super::Strategy;

pub struct Lease;

impl Strategy for Lease {
    crate::typed_kind!(coordination::Lease);

    fn allow_create_on_update(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("Holder"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/holderIdentity")),
            json!(print::age(obj, now)),
        ]
    }
}
