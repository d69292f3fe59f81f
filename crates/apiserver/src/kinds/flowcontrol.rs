//! FlowSchemas and PriorityLevelConfigurations (`flowcontrol.apiserver.k8s.io/v1`): their
//! columns (API Priority and Fairness reads them in `crate::flowcontrol`).

use rkube_api::k8s::api::flowcontrol::v1 as flowcontrol;
use rkube_api::meta;
use serde_json::{json, Value};

use super::print::{self, number, or_none, s, Column};
use super::Strategy;
use crate::reconcile;

/// Flow control's bootstrap objects get upstream's default spec back.
fn reconcile_spec(current: &Value, desired: &Value) -> Option<Value> {
    if reconcile::opted_out(current, reconcile::APF_AUTOUPDATE) {
        return None;
    }
    reconcile::default_spec(current, desired)
}

pub struct FlowSchema;
pub struct PriorityLevelConfiguration;

impl Strategy for FlowSchema {
    crate::typed_kind!(flowcontrol::FlowSchema);

    fn reconcile_bootstrap(&self, current: &Value, desired: &Value) -> Option<Value> {
        reconcile_spec(current, desired)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("PriorityLevel"),
            Column::text("MatchingPrecedence"),
            Column::text("DistinguisherMethod"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/priorityLevelConfiguration/name")),
            json!(number(obj, "/spec/matchingPrecedence")),
            json!(or_none(s(obj, "/spec/distinguisherMethod/type"))),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for PriorityLevelConfiguration {
    crate::typed_kind!(flowcontrol::PriorityLevelConfiguration);

    fn reconcile_bootstrap(&self, current: &Value, desired: &Value) -> Option<Value> {
        reconcile_spec(current, desired)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Type"),
            Column::text("NominalConcurrencyShares"),
            Column::text("Queues"),
            Column::text("HandSize"),
            Column::text("QueueLengthLimit"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let q = "/spec/limited/limitResponse/queuing";
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/type")),
            json!(number(obj, "/spec/limited/nominalConcurrencyShares")),
            json!(number(obj, &format!("{q}/queues"))),
            json!(number(obj, &format!("{q}/handSize"))),
            json!(number(obj, &format!("{q}/queueLengthLimit"))),
            json!(print::age(obj, now)),
        ]
    }
}
