//! `etcdserverpb.Lease`: grant, revoke, time-to-live, the lease list, and the keep-alive
//! stream (one response per request, until the client ends its side or the server stops).

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use rkube_etcd_api::pb;
use tonic::{Request, Response, Status, Streaming};

use super::unary;
use crate::service::App;

pub struct Lease(pub App);

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::lease_server::Lease for Lease {
    async fn lease_grant(
        &self,
        req: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        let call = self.0.lease_grant(req.into_inner().into());
        unary(&self.0, "lease/grant", call).await
    }

    async fn lease_revoke(
        &self,
        req: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let call = self.0.lease_revoke(req.into_inner().id);
        unary(&self.0, "lease/revoke", call).await
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        let app = self.0.clone();
        let shutdown = app.shutdown.clone();
        let responses = req
            .into_inner()
            .take_until(async move { shutdown.cancelled().await })
            .map(move |r| r.map(|r| app.lease_keepalive(r.id).into()));
        Ok(Response::new(Box::pin(responses)))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let req = req.into_inner().into();
        unary(&self.0, "lease/timetolive", async {
            Ok(self.0.lease_time_to_live(req))
        })
        .await
    }

    async fn lease_leases(
        &self,
        _: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        unary(&self.0, "lease/leases", async { Ok(self.0.lease_leases()) }).await
    }
}
