//! A whole rkube cluster inside a Rust test: the store (in memory), the apiserver, the
//! controller-manager, the scheduler and simulated nodes run on the test's own runtime, each
//! on a loopback port the kernel picked, and the test gets a `kube::Client`.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use rkube_testcluster::TestCluster;
//! let cluster = TestCluster::builder().nodes(3).start().await?;
//! let client = cluster.client();
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
//! // … create objects, run the controller under test, assert on what it did …
//! # Ok(()) }
//! ```
//!
//! Clusters are independent: many can run at once in one test binary. Dropping one stops it;
//! [`TestCluster::shutdown`] stops it and waits. Use a multi-threaded runtime
//! (`#[tokio::test(flavor = "multi_thread")]`): the cluster's components run as tasks beside
//! the test.

use std::path::Path;
use std::time::Duration;

pub use rkube::cluster::Options;

/// What the cluster runs; [`TestCluster::builder`] starts from one node, every controller and
/// the scheduler, open (no TLS, no authorization).
#[derive(Clone, Default)]
pub struct Builder {
    opts: Options,
}

impl Builder {
    /// Simulated nodes (0: none).
    pub fn nodes(mut self, n: usize) -> Self {
        self.opts.nodes = n;
        self
    }

    /// The controllers to run, as `--controllers` (`"*"`, `"-garbage-collector"`, …).
    pub fn controllers<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.opts.controllers = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// No controller-manager: objects are stored and served but nothing acts on them.
    pub fn without_controllers(mut self) -> Self {
        self.opts.controllers = None;
        self
    }

    /// Run the scheduler (default) or not (pods stay Pending).
    pub fn scheduler(mut self, on: bool) -> Self {
        self.opts.scheduler = on;
        self
    }

    /// The API alone, as envtest runs it: no controllers, no scheduler, no nodes.
    pub fn api_only(self) -> Self {
        self.without_controllers().scheduler(false).nodes(0)
    }

    /// HTTPS with a fresh CA, client certificates for every component and the admin, and
    /// Node+RBAC authorization, as a kubeadm cluster.
    pub fn secure(mut self, on: bool) -> Self {
        self.opts.secure = on;
        self
    }

    /// Change the apiserver's configuration before it starts.
    pub fn configure_apiserver(
        mut self,
        f: impl Fn(&mut rkube::cluster::ApiserverConfig) + Send + Sync + 'static,
    ) -> Self {
        self.opts.apiserver_tweaks.push(std::sync::Arc::new(f));
        self
    }

    /// Everything else `rkube::cluster::Options` offers.
    pub fn options(mut self, f: impl FnOnce(&mut Options)) -> Self {
        f(&mut self.opts);
        self
    }

    /// Starts the cluster and returns once every component is ready and every node Ready.
    pub async fn start(self) -> anyhow::Result<TestCluster> {
        let cluster = rkube::Cluster::start(self.opts).await?;
        let kubeconfig = tempfile::Builder::new()
            .prefix("rkube-kubeconfig-")
            .suffix(".yaml")
            .tempfile()?;
        cluster.write_kubeconfig(kubeconfig.path())?;
        let parsed = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default()).await?;
        Ok(TestCluster {
            client: kube::Client::try_from(config.clone())?,
            config,
            kubeconfig,
            cluster: Some(cluster),
        })
    }
}

/// A running cluster.
pub struct TestCluster {
    cluster: Option<rkube::Cluster>,
    config: kube::Config,
    client: kube::Client,
    kubeconfig: tempfile::NamedTempFile,
}

impl TestCluster {
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A cluster with the defaults: one node, every controller, the scheduler.
    pub async fn start() -> anyhow::Result<TestCluster> {
        Self::builder().start().await
    }

    /// A client as the cluster's admin.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The admin's client configuration (to build clients with other settings).
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// The admin kubeconfig file (for kubectl or another process), removed with the cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        self.kubeconfig.path()
    }

    /// The in-process cluster: its URL, nodes, PKI directory, startup time.
    pub fn cluster(&self) -> &rkube::Cluster {
        self.cluster.as_ref().expect("present until shutdown")
    }

    /// The apiserver's URL.
    pub fn server(&self) -> &str {
        &self.cluster().server
    }

    /// Stops every component (nodes and controllers first, storage last) and waits for them.
    pub async fn shutdown(mut self) {
        if let Some(c) = self.cluster.take() {
            c.shutdown(Duration::from_secs(10)).await;
        }
    }
}
