//! `etcdserverpb.KV`: Range, Put, DeleteRange, Txn and Compact over gRPC.

use rkube_etcd_api::pb;
use tonic::{Request, Response, Status};

use super::unary;
use crate::service::App;

pub struct Kv(pub App);

#[tonic::async_trait]
impl pb::kv_server::Kv for Kv {
    async fn range(
        &self,
        req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        unary(&self.0, "kv/range", self.0.range(req.into_inner().into())).await
    }

    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        unary(&self.0, "kv/put", self.0.put(req.into_inner().into())).await
    }

    async fn delete_range(
        &self,
        req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let call = self.0.delete_range(req.into_inner().into());
        unary(&self.0, "kv/deleterange", call).await
    }

    async fn txn(&self, req: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        unary(&self.0, "kv/txn", self.0.txn(req.into_inner().into())).await
    }

    async fn compact(
        &self,
        req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        let call = self.0.compact(req.into_inner().into());
        unary(&self.0, "kv/compaction", call).await
    }
}
