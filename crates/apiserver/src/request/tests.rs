use super::*;

fn info(method: &str, uri: &str) -> RequestInfo {
    RequestInfo::parse(&method.parse().unwrap(), &uri.parse().unwrap()).unwrap()
}

fn res(i: &RequestInfo) -> &ResourceInfo {
    i.resource.as_ref().expect("a resource request")
}

#[test]
fn paths() {
    let i = info("GET", "/api/v1/namespaces/default/pods/nginx/status");
    let r = res(&i);
    assert_eq!(i.verb, "get");
    assert_eq!(
        (
            r.def.unwrap().plural,
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.subresource.as_deref()
        ),
        ("pods", Some("default"), Some("nginx"), Some("status"))
    );
    let i = info("GET", "/api/v1/namespaces/kube-system");
    assert_eq!(
        (res(&i).def.unwrap().plural, res(&i).name.as_deref()),
        ("namespaces", Some("kube-system"))
    );
    let i = info("PUT", "/api/v1/namespaces/x/finalize");
    assert_eq!(
        (res(&i).name.as_deref(), res(&i).subresource.as_deref()),
        (Some("x"), Some("finalize"))
    );
    let i = info("GET", "/apis/apps/v1/watch/namespaces/default/deployments");
    assert_eq!(i.verb, "watch");
    assert_eq!(res(&i).def.unwrap().kind, "Deployment");
    assert!(res(&info("GET", "/api/v1/pods")).namespace.is_none());
    // Not served: still a resource request (authorized as such), with no def.
    let i = info("GET", "/api/v1/namespaces/default/widgets");
    assert_eq!((i.verb, res(&i).def), ("list", None));
    assert_eq!(i.attributes().resource, "widgets");
    assert!(res(&info("GET", "/api/v1/namespaces/default/pods/x/bogus"))
        .def
        .is_none());
    assert!(
        res(&info("GET", "/api/v1/namespaces/default/pods/x/log/extra"))
            .def
            .is_none()
    );
    // Cluster-scoped resources under a namespace are not served.
    assert!(res(&info("GET", "/api/v1/namespaces/default/nodes"))
        .def
        .is_none());
    assert!(info("GET", "/healthz").resource.is_none());
    assert!(info("GET", "/api").resource.is_none());
    assert!(info("GET", "/api/v1").resource.is_none());
    assert!(res(&info(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    ))
    .is_review());
}

#[test]
fn verbs_are_decided_once() {
    assert_eq!(info("GET", "/api/v1/pods?watch=1").verb, "watch");
    assert_eq!(info("GET", "/api/v1/pods?watch").verb, "watch");
    assert_eq!(info("GET", "/api/v1/pods?watch=false").verb, "list");
    // A named GET is a get, whatever its query says.
    assert_eq!(
        info("GET", "/api/v1/namespaces/d/pods/p?watch=1").verb,
        "get"
    );
    assert_eq!(
        info("DELETE", "/api/v1/namespaces/d/pods").verb,
        "deletecollection"
    );
    assert_eq!(info("DELETE", "/api/v1/namespaces/d/pods/p").verb, "delete");
    assert_eq!(info("PATCH", "/api/v1/namespaces/d/pods/p").verb, "patch");
    assert_eq!(info("BREW", "/api/v1/namespaces/d/pods/p").verb, "");
    assert_eq!(info("GET", "/version").verb, "get");
    // Ambiguous: refused before anyone reads it.
    let e = RequestInfo::parse(
        &Method::GET,
        &"/api/v1/pods?watch=1&watch=0".parse().unwrap(),
    )
    .unwrap_err();
    assert_eq!(e.code(), 400);
}

#[test]
fn a_list_by_name_is_authorized_as_that_object() {
    let i = info(
        "GET",
        "/api/v1/namespaces/d/pods?watch=1&fieldSelector=metadata.name%3Dweb",
    );
    assert_eq!(i.verb, "watch");
    assert_eq!(i.attributes().name, "web");
    assert!(res(&i).name.is_none());
}

#[test]
fn long_running_and_health() {
    assert!(info("GET", "/api/v1/pods?watch=true").long_running());
    assert!(info("GET", "/api/v1/namespaces/d/pods/p/log").long_running());
    assert!(!info("GET", "/api/v1/pods").long_running());
    // Only a pod's log streams: a custom resource's `log` subresource holds a seat.
    assert!(!info("GET", "/apis/example.com/v1/namespaces/d/things/t/log").long_running());
    assert!(!info("GET", "/api/v1/namespaces/d/services/s/log").long_running());
    assert!(info("GET", "/readyz").is_health());
    assert!(info("GET", "/livez/ping").is_health());
    assert!(!info("GET", "/api/v1/pods").is_health());
}
