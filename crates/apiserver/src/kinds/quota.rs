//! LimitRanges and ResourceQuotas: plain kinds (their admission plugins live in `admission`).

use rkube_api::k8s::api::core::v1 as core;

use super::Strategy;

pub struct LimitRange;
pub struct ResourceQuota;

impl Strategy for LimitRange {
    crate::typed_kind!(core::LimitRange);
}

impl Strategy for ResourceQuota {
    crate::typed_kind!(core::ResourceQuota);
}
