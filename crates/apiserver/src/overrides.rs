//! `--etcd-servers-overrides`: resources kept on storage of their own (large clusters put
//! Events on a separate etcd). Upstream's format: comma-separated `group/resource#servers`,
//! servers separated by semicolons; the core group is empty (`/events#https://e1:2379`).
//! Resources that share a storage prefix (core and events.k8s.io Events) share the override.

use rkube_api::resources::ResourceDef;

/// One override: the resource and the servers that hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    pub group: String,
    pub resource: String,
    pub servers: Vec<String>,
}

/// Parses the flag's value, refusing resources this server does not have.
pub fn parse(value: &str, resources: &[ResourceDef]) -> Result<Vec<Override>, String> {
    let mut out: Vec<Override> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (gr, servers) = item
            .split_once('#')
            .ok_or_else(|| format!("{item:?}: expected group/resource#servers"))?;
        let (group, resource) = gr.split_once('/').ok_or_else(|| {
            format!("{item:?}: expected group/resource (the core group is empty: /events)")
        })?;
        let servers: Vec<String> = servers
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if servers.is_empty() {
            return Err(format!("{item:?}: no servers"));
        }
        if let Some(s) = servers
            .iter()
            .find(|s| !s.starts_with("http://") && !s.starts_with("https://"))
        {
            return Err(format!("{item:?}: {s:?} is not an http:// or https:// URL"));
        }
        if !resources
            .iter()
            .any(|d| d.group == group && d.plural == resource && !d.storage_prefix.is_empty())
        {
            return Err(format!(
                "{item:?}: no stored resource {resource:?} in group {group:?}"
            ));
        }
        if out
            .iter()
            .any(|o| o.group == group && o.resource == resource)
        {
            return Err(format!("{item:?}: {gr} is overridden twice"));
        }
        out.push(Override {
            group: group.into(),
            resource: resource.into(),
            servers,
        });
    }
    Ok(out)
}

/// The override that applies to `def`: its own, or that of a resource stored under the same
/// prefix.
pub fn for_def<'a>(
    overrides: &'a [Override],
    def: &ResourceDef,
    resources: &[ResourceDef],
) -> Option<&'a Override> {
    overrides.iter().find(|o| {
        resources.iter().any(|d| {
            d.group == o.group
                && d.plural == o.resource
                && ((d.group == def.group && d.plural == def.plural)
                    || (!def.storage_prefix.is_empty() && d.storage_prefix == def.storage_prefix))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_api::resources::RESOURCES;

    #[test]
    fn events_go_to_their_own_servers_with_their_cohabitants() {
        let o = parse("/events#http://e1:2379;http://e2:2379", RESOURCES).unwrap();
        assert_eq!(o[0].servers, ["http://e1:2379", "http://e2:2379"]);
        let def = |g: &str, r: &str| {
            RESOURCES
                .iter()
                .find(|d| d.group == g && d.plural == r)
                .unwrap()
        };
        assert!(for_def(&o, def("", "events"), RESOURCES).is_some());
        assert!(for_def(&o, def("events.k8s.io", "events"), RESOURCES).is_some());
        assert!(for_def(&o, def("", "pods"), RESOURCES).is_none());
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        for (value, why) in [
            ("events#http://e:2379", "group/resource"),
            ("/events", "group/resource#servers"),
            ("/events#", "no servers"),
            ("/events#e:2379", "not an http"),
            ("/nothings#http://e:2379", "no stored resource"),
            ("/events#http://a:1,/events#http://b:1", "twice"),
        ] {
            let err = parse(value, RESOURCES).unwrap_err();
            assert!(err.contains(why), "{value}: {err}");
        }
        assert!(parse("", RESOURCES).unwrap().is_empty());
    }
}
