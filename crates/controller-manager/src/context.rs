//! What the controllers share: one client, one event recorder, the metrics registry, and one
//! informer per resource (so ten controllers watching pods cost one watch).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, PersistentVolume, PersistentVolumeClaim,
    ReplicationController, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use rkube_client::events::Recorder;
use rkube_client::informer::{index, key_of};
use rkube_client::pod::Pod;
use rkube_client::Resource;

use crate::objects::{controller_ref, labels_of, selector};
use rkube_client::{Api, Client, Informer, ListParams, Stats, Store};
use rkube_daemon::metrics::Registry;
use tokio_util::sync::CancellationToken;

pub struct Ctx {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Registry>,
    pub pods: Arc<Store<Pod>>,
    pub replicasets: Arc<Store<ReplicaSet>>,
    pub replication_controllers: Arc<Store<ReplicationController>>,
    pub deployments: Arc<Store<Deployment>>,
    pub jobs: Arc<Store<Job>>,
    pub daemonsets: Arc<Store<DaemonSet>>,
    pub cronjobs: Arc<Store<CronJob>>,
    pub statefulsets: Arc<Store<StatefulSet>>,
    pub revisions: Arc<Store<ControllerRevision>>,
    pub hpas: Arc<Store<HorizontalPodAutoscaler>>,
    pub nodes: Arc<Store<Node>>,
    /// Node heartbeats: Leases in `kube-node-lease`.
    pub node_leases: Arc<Store<Lease>>,
    pub namespaces: Arc<Store<Namespace>>,
    pub services: Arc<Store<Service>>,
    pub endpoints: Arc<Store<Endpoints>>,
    pub endpoint_slices: Arc<Store<EndpointSlice>>,
    pub service_accounts: Arc<Store<ServiceAccount>>,
    /// The `kube-root-ca.crt` ConfigMaps only.
    pub root_ca_maps: Arc<Store<ConfigMap>>,
    pub claims: Arc<Store<PersistentVolumeClaim>>,
    pub volumes: Arc<Store<PersistentVolume>>,
    pub storage_classes: Arc<Store<StorageClass>>,
    pub pdbs: Arc<Store<PodDisruptionBudget>>,
    pub csrs: Arc<Store<CertificateSigningRequest>>,
    informers: std::sync::Mutex<Vec<Starter>>,
}

/// Starts an informer once the controllers are wired up.
type Starter = Box<dyn FnOnce(CancellationToken) + Send>;

fn informer<K: rkube_client::Resource>(
    api: Api<K>,
    metrics: &Registry,
) -> (Arc<Store<K>>, Starter) {
    informer_with(api, ListParams::default(), metrics)
}

fn informer_with<K: rkube_client::Resource>(
    api: Api<K>,
    params: ListParams,
    metrics: &Registry,
) -> (Arc<Store<K>>, Starter) {
    let inf = Informer::new(api, params);
    export(metrics, K::URL_PATH_SEGMENT, inf.stats());
    let store = inf.store();
    store.add_index(index::OWNER_UID, index::owner_uid::<K>);
    store.add_index(index::ORPHANS, index::orphans::<K>);
    (
        store,
        Box::new(move |s| {
            inf.spawn(s);
        }),
    )
}

/// Exports a reflector's counters under `resource`.
pub fn export(metrics: &Registry, resource: &str, stats: Arc<Stats>) {
    for (name, help, get) in Stats::SERIES {
        let st = stats.clone();
        metrics.gauge_fn(name, help, &[("resource", resource)], move || {
            get(&st) as f64
        });
    }
}

/// `ns/name` of the controller `meta` points to, when it is a `K` that `store` holds with that
/// UID (a stale reference to a deleted and re-created owner does not count).
pub fn controller_key<K: Resource>(store: &Store<K>, meta: &ObjectMeta) -> Option<String> {
    let r = controller_ref(meta)?;
    if r.kind != K::KIND {
        return None;
    }
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let owner = store.get_in(ns, &r.name)?;
    (owner.metadata().uid.as_deref() == Some(r.uid.as_str())).then(|| format!("{ns}/{}", r.name))
}

/// Keys of the `K`s in `meta`'s namespace whose selector matches its labels (for orphans).
pub fn selecting<K: Resource>(
    store: &Store<K>,
    meta: &ObjectMeta,
    selector_of: impl Fn(&K) -> Option<&LabelSelector>,
) -> Vec<String> {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let labels = labels_of(meta);
    store
        .by_index(index::NAMESPACE, ns)
        .iter()
        .filter(|o| selector(selector_of(o)).is_some_and(|s| s.matches(&labels)))
        .map(|o| key_of(&**o))
        .collect()
}

impl Ctx {
    pub fn new(client: Client, recorder: Recorder, metrics: Arc<Registry>) -> Arc<Self> {
        let mut starts = Vec::new();
        let (pods, s) = informer(Api::<Pod>::all(&client), &metrics);
        pods.add_index(index::NODE_NAME, index::pod_node_name);
        pods.set_transform(rkube_client::informer::transform::compact_pod);
        starts.push(s);
        let (replicasets, s) = informer(Api::<ReplicaSet>::all(&client), &metrics);
        starts.push(s);
        let (replication_controllers, s) =
            informer(Api::<ReplicationController>::all(&client), &metrics);
        starts.push(s);
        let (deployments, s) = informer(Api::<Deployment>::all(&client), &metrics);
        starts.push(s);
        let (jobs, s) = informer(Api::<Job>::all(&client), &metrics);
        starts.push(s);
        let (cronjobs, s) = informer(Api::<CronJob>::all(&client), &metrics);
        starts.push(s);
        let (daemonsets, s) = informer(Api::<DaemonSet>::all(&client), &metrics);
        starts.push(s);
        let (statefulsets, s) = informer(Api::<StatefulSet>::all(&client), &metrics);
        starts.push(s);
        let (revisions, s) = informer(Api::<ControllerRevision>::all(&client), &metrics);
        starts.push(s);
        let (hpas, s) = informer(Api::<HorizontalPodAutoscaler>::all(&client), &metrics);
        starts.push(s);
        let (nodes, s) = informer(Api::<Node>::all(&client), &metrics);
        starts.push(s);
        let (node_leases, s) = informer(
            Api::<Lease>::namespaced(&client, "kube-node-lease"),
            &metrics,
        );
        starts.push(s);
        let (namespaces, s) = informer(Api::<Namespace>::all(&client), &metrics);
        starts.push(s);
        let (services, s) = informer(Api::<Service>::all(&client), &metrics);
        starts.push(s);
        let (endpoints, s) = informer(Api::<Endpoints>::all(&client), &metrics);
        starts.push(s);
        let (endpoint_slices, s) = informer(Api::<EndpointSlice>::all(&client), &metrics);
        starts.push(s);
        let (service_accounts, s) = informer(Api::<ServiceAccount>::all(&client), &metrics);
        starts.push(s);
        let (root_ca_maps, s) = informer_with(
            Api::<ConfigMap>::all(&client),
            ListParams::default().fields("metadata.name=kube-root-ca.crt"),
            &metrics,
        );
        starts.push(s);
        let (claims, s) = informer(Api::<PersistentVolumeClaim>::all(&client), &metrics);
        starts.push(s);
        let (volumes, s) = informer(Api::<PersistentVolume>::all(&client), &metrics);
        starts.push(s);
        let (storage_classes, s) = informer(Api::<StorageClass>::all(&client), &metrics);
        starts.push(s);
        let (pdbs, s) = informer(Api::<PodDisruptionBudget>::all(&client), &metrics);
        starts.push(s);
        let (csrs, s) = informer(Api::<CertificateSigningRequest>::all(&client), &metrics);
        starts.push(s);
        Arc::new(Ctx {
            client,
            recorder,
            metrics,
            pods,
            replicasets,
            replication_controllers,
            deployments,
            jobs,
            cronjobs,
            daemonsets,
            statefulsets,
            revisions,
            hpas,
            nodes,
            node_leases,
            namespaces,
            services,
            endpoints,
            endpoint_slices,
            service_accounts,
            root_ca_maps,
            claims,
            volumes,
            storage_classes,
            pdbs,
            csrs,
            informers: std::sync::Mutex::new(starts),
        })
    }

    /// Starts every informer (after the controllers registered their handlers).
    pub fn start_informers(&self, shutdown: &CancellationToken) {
        for start in self.informers.lock().unwrap().drain(..) {
            start(shutdown.clone());
        }
    }

    pub async fn wait_synced(&self) {
        self.pods.wait_synced().await;
        self.replicasets.wait_synced().await;
        self.replication_controllers.wait_synced().await;
        self.deployments.wait_synced().await;
        self.jobs.wait_synced().await;
        self.cronjobs.wait_synced().await;
        self.daemonsets.wait_synced().await;
        self.statefulsets.wait_synced().await;
        self.revisions.wait_synced().await;
        self.hpas.wait_synced().await;
        self.nodes.wait_synced().await;
        self.node_leases.wait_synced().await;
        self.namespaces.wait_synced().await;
        self.services.wait_synced().await;
        self.endpoints.wait_synced().await;
        self.endpoint_slices.wait_synced().await;
        self.service_accounts.wait_synced().await;
        self.root_ca_maps.wait_synced().await;
        self.claims.wait_synced().await;
        self.volumes.wait_synced().await;
        self.storage_classes.wait_synced().await;
        self.pdbs.wait_synced().await;
        self.csrs.wait_synced().await;
    }
}
