//! `etcdserverpb.Watch/Watch` over gRPC: a full-duplex stream served by the same stream
//! machinery as the gateway's `/v3/watch` (`crate::watch_stream`), in protobuf.
//!
//! The service is written against tonic's server API rather than generated, because its
//! responses are already-encoded bytes: each event is encoded once, however many watchers
//! receive it (`crate::watch::event`), and the response around it is assembled from those
//! bytes. `RawCodec` sends them as they are and decodes requests with prost.

use std::convert::Infallible;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use futures_util::StreamExt;
use prost::Message;
use rkube_etcd_api::{pb, WatchRequest};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Status, Streaming};

use crate::error::StoreError;
use crate::service::App;
use crate::watch::event::Wire;
use crate::watch_stream::{self, Requests};

/// The Watch service for tonic's router.
#[derive(Clone)]
pub struct WatchService {
    app: App,
    max_decoding: usize,
}

impl WatchService {
    pub fn new(app: App, max_decoding: usize) -> Self {
        WatchService { app, max_decoding }
    }
}

impl NamedService for WatchService {
    const NAME: &'static str = "etcdserverpb.Watch";
}

impl<B> Service<http::Request<B>> for WatchService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/etcdserverpb.Watch/Watch" {
                return Ok(Status::unimplemented("unknown method").into_http());
            }
            let mut grpc =
                Grpc::new(RawCodec).apply_max_message_size_config(Some(this.max_decoding), None);
            Ok(grpc.streaming(Handler(this.app), req).await)
        })
    }
}

struct Handler(App);

type ResponseStream = futures_util::stream::BoxStream<'static, Result<Bytes, Status>>;

impl StreamingService<pb::WatchRequest> for Handler {
    type Response = Bytes;
    type ResponseStream = ResponseStream;
    type Future = BoxFuture<tonic::Response<ResponseStream>, Status>;

    fn call(&mut self, request: tonic::Request<Streaming<pb::WatchRequest>>) -> Self::Future {
        let app = self.0.clone();
        Box::pin(async move {
            app.mvcc.metrics.watch_started();
            let requests: Requests = Box::pin(request.into_inner().map(|r| {
                r.map(WatchRequest::from)
                    .map_err(|s| StoreError::StreamDecode(s.message().to_string()))
            }));
            let out = watch_stream::start(
                app.mvcc.clone(),
                app.watch.clone(),
                app.shutdown.clone(),
                Wire::Proto,
                None,
                requests,
            );
            let stream = tokio_stream::wrappers::ReceiverStream::new(out).map(Ok);
            Ok(tonic::Response::new(stream.boxed()))
        })
    }
}

/// Sends already-encoded `WatchResponse` bytes; decodes `WatchRequest`s with prost.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = pb::WatchRequest;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = pb::WatchRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<pb::WatchRequest>, Status> {
        let len = src.remaining();
        let msg = pb::WatchRequest::decode(src.copy_to_bytes(len))
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Some(msg))
    }
}
