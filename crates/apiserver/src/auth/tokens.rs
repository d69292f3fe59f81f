//! `--token-auth-file`: upstream's static token CSV, `token,user,uid,"group1,group2"` (groups
//! optional), one user per line.

use std::collections::HashMap;

use rkube_api::authz::UserInfo;

/// Splits one CSV line, honouring double quotes.
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().expect("one field at least").push(c),
        }
    }
    out.into_iter().map(|f| f.trim().to_string()).collect()
}

/// Token → user; an error names the first bad line.
pub fn parse(text: &str) -> Result<HashMap<String, UserInfo>, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f = fields(line);
        if f.len() < 3 || f[0].is_empty() || f[1].is_empty() {
            return Err(format!(
                "line {}: want token,user,uid[,\"group1,group2\"], got {line:?}",
                i + 1
            ));
        }
        let groups = f
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        users.insert(f[0].clone(), UserInfo::authenticated(&f[1], &f[2], groups));
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_csv_with_quoted_groups() {
        let users = parse(
            "# admin\nt0k,admin,1,\"system:masters,ops\"\nn1,system:node:n1,2,system:nodes\nplain,bob,3\n",
        )
        .unwrap();
        let admin = &users["t0k"];
        assert_eq!(admin.name, "admin");
        assert_eq!(
            admin.groups,
            ["system:masters", "ops", "system:authenticated"]
        );
        assert_eq!(users["n1"].node_name(), Some("n1"));
        assert_eq!(users["plain"].groups, ["system:authenticated"]);
        assert!(parse("only-a-token\n").unwrap_err().contains("line 1"));
        assert!(parse("ok,u,1\n,nobody,2\n").unwrap_err().contains("line 2"));
    }
}
