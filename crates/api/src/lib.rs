//! rkube-api: Kubernetes API machinery as plain data and pure functions — no async runtime,
//! no HTTP. The resource table (`resources`), label and field selectors, `metav1.Status`
//! errors (`status`), list/watch/delete options, continue tokens, name validation and
//! metadata helpers over JSON objects. k8s-openapi's types are re-exported as `k8s`.

pub use k8s_openapi as k8s;

pub mod authz;
pub mod bounds;
pub mod cidr;
pub mod claims;
pub mod continue_token;
pub mod cron;
pub mod decode;
pub mod fields;
pub mod fuzz;
pub mod intern;
pub mod kubeconfig;
pub mod managed;
pub mod meta;
pub mod nodeaffinity;
pub mod options;
pub mod patch;
pub mod proto;
pub mod quantity;
pub mod resources;
pub mod selector;
pub mod status;
pub mod strategic;
pub mod taints;
pub mod validation;

pub use fields::FieldSelector;
pub use options::{DeleteOptions, ListOptions, Propagation, Query};
pub use resources::{ResourceDef, RESOURCES};
pub use selector::LabelSelector;
pub use status::{ApiError, GroupResource, Status, StatusCause, StatusDetails};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";
