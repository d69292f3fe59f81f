//! Name and label validation with apimachinery's rules and messages (DNS-1123 label and
//! subdomain, qualified names, label values, path segment names).

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.len() > DNS1123_LABEL_MAX {
        return Err(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    let ok = !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|c| is_alnum_lower(*c) || *c == b'-');
    if !ok {
        return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
    }
    Ok(())
}

/// Dot-separated DNS-1123 labels, at most 253 characters.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let ok = !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter()
            .all(|c| is_alnum_lower(*c) || *c == b'-' || *c == b'.')
        && s.split('.').all(|part| {
            !part.is_empty()
                && is_alnum_lower(part.as_bytes()[0])
                && is_alnum_lower(*part.as_bytes().last().unwrap())
        });
    if !ok {
        return Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    Ok(())
}

fn qualified_name_part(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if b.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    let ok =
        alnum(b[0]) && alnum(b[b.len() - 1]) && b.iter().all(|c| alnum(*c) || b"-_.".contains(c));
    if !ok {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    Ok(())
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123 subdomain.
pub fn qualified_name(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err("prefix part must be non-empty".into());
            }
            dns1123_subdomain(prefix).map_err(|e| format!("prefix part {e}"))?;
            if name.contains('/') {
                return Err("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
            }
            qualified_name_part(name)
        }
        None => qualified_name_part(s),
    }
}

/// A label value: empty, or like a qualified name part.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    let ok =
        alnum(b[0]) && alnum(b[b.len() - 1]) && b.iter().all(|c| alnum(*c) || b"-_.".contains(c));
    if !ok {
        return Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    Ok(())
}

/// Names used as a path segment may not be `.`, `..` or contain `/` or `%`.
pub fn path_segment_name(s: &str) -> Result<(), String> {
    if s == "." || s == ".." {
        return Err(format!("may not be '{s}'"));
    }
    if s.contains('/') {
        return Err("may not contain '/'".into());
    }
    if s.contains('%') {
        return Err("may not contain '%'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("nginx-deployment-756d9fd5f9-fkqnf").is_ok());
        assert!(dns1123_subdomain("a.b.c").is_ok());
        assert!(dns1123_subdomain("Nginx").is_err());
        assert!(dns1123_subdomain("-a").is_err());
        assert!(dns1123_subdomain("a..b").is_err());
        assert!(dns1123_label("kube-system").is_ok());
        assert!(dns1123_label("a.b").is_err());
        assert!(qualified_name("app.kubernetes.io/name").is_ok());
        assert!(qualified_name("app").is_ok());
        assert!(qualified_name("/app").is_err());
        assert!(qualified_name("a/b/c").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("v1.2_x").is_ok());
        assert!(label_value("-x").is_err());
        assert!(path_segment_name("..").is_err());
    }
}
