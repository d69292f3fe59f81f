//! The kubeconfig document rkube writes for kubectl and its own components (the apiserver's
//! `--write-kubeconfig`, the up script, the test clusters).

/// A kubeconfig with one cluster/user/context named `name`, pointing at `server`.
pub fn kubeconfig_yaml(name: &str, server: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => format!("    token: {t}\n"),
        None => "    {}\n".to_string(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n\
         users:\n- name: {name}\n  user:\n{user}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n\
         current-context: {name}\n"
    )
}
