//! The Kubernetes CEL libraries rules commonly call (upstream's
//! `k8s.io/apiserver/pkg/cel/library`), as functions on a context: lists (`isSorted`,
//! `sum`), regex (`find`, `findAll`), URLs (`url`, `isURL` and their getters), quantities
//! (`quantity`, `isQuantity`, comparisons, `asInteger`) and IP addresses and CIDRs (`ip`,
//! `isIP`, `family`, `cidr`, `isCIDR`, `containsIP`). URLs, quantities, IPs and CIDRs are
//! maps tagged with one key, so the member functions know them.

use std::collections::HashMap;
use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::objects::{Key, Map};
use cel::{Context, ExecutionError, FunctionContext, Value as Cel};

type R = Result<Cel, ExecutionError>;

fn tagged(tag: &str, value: Cel) -> Cel {
    let mut m = HashMap::new();
    m.insert(Key::String(Arc::new(tag.to_string())), value);
    Cel::Map(Map { map: Arc::new(m) })
}

fn untag<'a>(v: &'a Cel, tag: &str) -> Option<&'a Cel> {
    match v {
        Cel::Map(m) => m.map.get(&Key::String(Arc::new(tag.to_string()))),
        _ => None,
    }
}

fn text(v: &Cel) -> Option<&str> {
    match v {
        Cel::String(s) => Some(s.as_str()),
        _ => None,
    }
}

const QUANTITY: &str = "@quantity";
const URL: &str = "@url";
const IP: &str = "@ip";
const CIDR: &str = "@cidr";

fn err(ftx: &FunctionContext, m: impl ToString) -> ExecutionError {
    ftx.error(m)
}

fn ok_or_add<F: cel::extractors::IntoFunction<T> + 'static + Send + Sync, T: 'static>(
    ctx: &mut Context,
    name: &str,
    f: F,
) {
    // A name the environment already declares keeps its standard meaning.
    let _ = ctx.add_function(name, f);
}

pub fn register(ctx: &mut Context) {
    ok_or_add(ctx, "isSorted", |This(list): This<Arc<Vec<Cel>>>| {
        Cel::Bool(list.windows(2).all(|w| w[0] <= w[1]))
    });
    ok_or_add(
        ctx,
        "sum",
        |ftx: &FunctionContext, This(list): This<Arc<Vec<Cel>>>| -> R {
            let mut int: i64 = 0;
            let mut float: Option<f64> = None;
            for v in list.iter() {
                match v {
                    Cel::Int(i) => {
                        int = int
                            .checked_add(*i)
                            .ok_or_else(|| err(ftx, "integer overflow"))?
                    }
                    Cel::Float(f) => *float.get_or_insert(0.0) += f,
                    _ => return Err(err(ftx, "sum of a list that is not numeric")),
                }
            }
            Ok(match float {
                Some(f) => Cel::Float(f + int as f64),
                None => Cel::Int(int),
            })
        },
    );
    ok_or_add(
        ctx,
        "find",
        |ftx: &FunctionContext, This(s): This<Arc<String>>, re: Arc<String>| -> R {
            let re = regex(ftx, &re)?;
            Ok(Cel::String(Arc::new(
                re.find(&s)
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_default(),
            )))
        },
    );
    ok_or_add(
        ctx,
        "findAll",
        |ftx: &FunctionContext, This(s): This<Arc<String>>, Arguments(args): Arguments| -> R {
            let re = regex(ftx, args.first().and_then(text).unwrap_or(""))?;
            let limit = match args.get(1) {
                Some(Cel::Int(n)) if *n >= 0 => *n as usize,
                _ => usize::MAX,
            };
            let found: Vec<Cel> = re
                .find_iter(&s)
                .take(limit)
                .map(|m| Cel::String(Arc::new(m.as_str().to_string())))
                .collect();
            Ok(Cel::List(Arc::new(found)))
        },
    );
    // Quantities.
    ok_or_add(ctx, "isQuantity", |s: Arc<String>| {
        Cel::Bool(rkube_api::quantity::parse_milli(&s).is_some())
    });
    ok_or_add(
        ctx,
        "quantity",
        |ftx: &FunctionContext, s: Arc<String>| -> R {
            match rkube_api::quantity::parse_milli(&s) {
                Some(m) => Ok(tagged(QUANTITY, Cel::Int(m))),
                None => Err(err(ftx, format!("invalid quantity: {s}"))),
            }
        },
    );
    let milli = |ftx: &FunctionContext, v: &Cel| -> Result<i64, ExecutionError> {
        match untag(v, QUANTITY) {
            Some(Cel::Int(m)) => Ok(*m),
            _ => Err(err(ftx, "not a quantity")),
        }
    };
    ok_or_add(
        ctx,
        "isGreaterThan",
        move |ftx: &FunctionContext, This(a): This<Cel>, b: Cel| -> R {
            Ok(Cel::Bool(milli(ftx, &a)? > milli(ftx, &b)?))
        },
    );
    ok_or_add(
        ctx,
        "isLessThan",
        move |ftx: &FunctionContext, This(a): This<Cel>, b: Cel| -> R {
            Ok(Cel::Bool(milli(ftx, &a)? < milli(ftx, &b)?))
        },
    );
    ok_or_add(
        ctx,
        "compareTo",
        move |ftx: &FunctionContext, This(a): This<Cel>, b: Cel| -> R {
            Ok(Cel::Int(milli(ftx, &a)?.cmp(&milli(ftx, &b)?) as i64))
        },
    );
    ok_or_add(
        ctx,
        "asInteger",
        move |ftx: &FunctionContext, This(a): This<Cel>| -> R {
            let m = milli(ftx, &a)?;
            if m % 1000 != 0 {
                return Err(err(
                    ftx,
                    "cannot convert value to integer: the quantity has a fraction",
                ));
            }
            Ok(Cel::Int(m / 1000))
        },
    );
    ok_or_add(
        ctx,
        "asApproximateFloat",
        move |ftx: &FunctionContext, This(a): This<Cel>| -> R {
            Ok(Cel::Float(milli(ftx, &a)? as f64 / 1000.0))
        },
    );
    // URLs.
    ok_or_add(ctx, "isURL", |s: Arc<String>| {
        Cel::Bool(parse_url(&s).is_some())
    });
    ok_or_add(ctx, "url", |ftx: &FunctionContext, s: Arc<String>| -> R {
        match parse_url(&s) {
            Some(_) => Ok(tagged(URL, Cel::String(s))),
            None => Err(err(
                ftx,
                format!("URL parse error during conversion from string: {s}"),
            )),
        }
    });
    for (name, part) in [
        ("getScheme", 0usize),
        ("getHost", 1),
        ("getHostname", 2),
        ("getPort", 3),
        ("getEscapedPath", 4),
        ("getQuery", 5),
    ] {
        ok_or_add(
            ctx,
            name,
            move |ftx: &FunctionContext, This(u): This<Cel>| -> R {
                let s = untag(&u, URL)
                    .and_then(text)
                    .ok_or_else(|| err(ftx, "not a URL"))?;
                let p = parse_url(s).ok_or_else(|| err(ftx, "not a URL"))?;
                Ok(Cel::String(Arc::new(p[part].clone())))
            },
        );
    }
    // IPs and CIDRs.
    ok_or_add(ctx, "isIP", |s: Arc<String>| {
        Cel::Bool(s.parse::<std::net::IpAddr>().is_ok())
    });
    ok_or_add(ctx, "ip", |ftx: &FunctionContext, s: Arc<String>| -> R {
        s.parse::<std::net::IpAddr>()
            .map(|_| tagged(IP, Cel::String(s.clone())))
            .map_err(|_| {
                err(
                    ftx,
                    format!("IP Address {s:?} parse error during conversion from string"),
                )
            })
    });
    ok_or_add(
        ctx,
        "family",
        |ftx: &FunctionContext, This(v): This<Cel>| -> R {
            let ip: std::net::IpAddr = untag(&v, IP)
                .and_then(text)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err(ftx, "not an IP"))?;
            Ok(Cel::Int(if ip.is_ipv4() { 4 } else { 6 }))
        },
    );
    ok_or_add(ctx, "isCIDR", |s: Arc<String>| {
        Cel::Bool(rkube_api::cidr::Cidr::parse(&s).is_ok())
    });
    ok_or_add(ctx, "cidr", |ftx: &FunctionContext, s: Arc<String>| -> R {
        rkube_api::cidr::Cidr::parse(&s)
            .map(|_| tagged(CIDR, Cel::String(s.clone())))
            .map_err(|_| {
                err(
                    ftx,
                    format!("network address parse error during conversion from string: {s}"),
                )
            })
    });
    ok_or_add(
        ctx,
        "containsIP",
        |ftx: &FunctionContext, This(c): This<Cel>, ip: Cel| -> R {
            let cidr = untag(&c, CIDR)
                .and_then(text)
                .and_then(|s| rkube_api::cidr::Cidr::parse(s).ok())
                .ok_or_else(|| err(ftx, "not a CIDR"))?;
            let addr: std::net::IpAddr = untag(&ip, IP)
                .and_then(text)
                .or_else(|| text(&ip))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err(ftx, "not an IP"))?;
            Ok(Cel::Bool(cidr.contains(&addr)))
        },
    );
}

fn regex(ftx: &FunctionContext, re: &str) -> Result<regex::Regex, ExecutionError> {
    regex::RegexBuilder::new(re)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| err(ftx, e))
}

/// scheme, host (with port), hostname, port, escaped path, query of an absolute URL or an
/// absolute path.
fn parse_url(s: &str) -> Option<[String; 6]> {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (scheme, rest) = match s.split_once("://") {
        Some((sc, rest))
            if !sc.is_empty()
                && sc
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (sc.to_string(), rest)
        }
        Some(_) => return None,
        None if s.starts_with('/') => (String::new(), s),
        None => return None,
    };
    let (authority, path_query) = if scheme.is_empty() {
        ("", rest)
    } else {
        match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        }
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (hostname, port) = if let Some(v6) = host.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (
            h.to_string(),
            after.strip_prefix(':').unwrap_or("").to_string(),
        )
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.to_string()),
            None => (host.to_string(), String::new()),
        }
    };
    let (path, query) = match path_query.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (path_query.to_string(), String::new()),
    };
    Some([scheme, host.to_string(), hostname, port, path, query])
}

#[cfg(test)]
mod tests {
    use super::super::{compile, eval_bool};
    use serde_json::json;

    fn t(src: &str) -> bool {
        eval_bool(
            &compile(src).unwrap(),
            &[("self", &json!({"l": [1, 2, 3], "s": "a1b22c333"}))],
        )
        .unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    #[test]
    fn kubernetes_libraries() {
        assert!(t("self.l.isSorted() && self.l.sum() == 6"));
        assert!(t(
            "self.s.find('[0-9]+') == '1' && self.s.findAll('[0-9]+').size() == 3"
        ));
        assert!(t(
            "quantity('1Gi').isGreaterThan(quantity('500Mi')) && quantity('2').asInteger() == 2"
        ));
        assert!(t("isQuantity('100m') && !isQuantity('x')"));
        assert!(t(
            "url('https://example.com:8443/a/b?x=1').getHost() == 'example.com:8443'"
        ));
        assert!(t("url('https://example.com/a').getScheme() == 'https' && isURL('/path') && !isURL('no scheme')"));
        assert!(t(
            "ip('10.0.0.1').family() == 4 && cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))"
        ));
        assert!(t("isIP('::1') && !isCIDR('10.0.0.0/33')"));
    }
}
