//! `kubectl port-forward` on a simulated pod: which ports answer (those its containers
//! declare, and 80 of nginx images) and what an HTTP request to them gets (nginx's welcome
//! page from nginx images, a short text naming the pod otherwise). Pure.

use serde_json::Value;

/// The container answering on `port`: (name, image).
pub fn listener(pod: &Value, port: u16) -> Option<(String, String)> {
    let containers = pod["spec"]["containers"].as_array()?;
    let of = |c: &Value| {
        (
            c["name"].as_str().unwrap_or("").to_string(),
            c["image"].as_str().unwrap_or("").to_string(),
        )
    };
    containers
        .iter()
        .find(|c| {
            c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
        })
        .or_else(|| {
            containers
                .iter()
                .find(|c| port == 80 && is_nginx(c["image"].as_str().unwrap_or("")))
        })
        .map(of)
}

fn is_nginx(image: &str) -> bool {
    let name = image.rsplit('/').next().unwrap_or(image);
    name.starts_with("nginx")
}

/// The index page of the nginx image.
pub const NGINX_INDEX: &str = "<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href=\"http://nginx.org/\">nginx.org</a>.<br/>
Commercial support is available at
<a href=\"http://nginx.com/\">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
</body>
</html>
";

const NGINX_404: &str = "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx/1.27.3</center>\r\n</body>\r\n</html>\r\n";

/// Where a request head ends (after `\r\n\r\n`), if it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The response to one HTTP request head (the connection closes after it).
pub fn answer(pod: &Value, port: u16, head: &[u8], now: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut first = text.lines().next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("GET").to_string();
    let path = first.next().unwrap_or("/").to_string();
    let (_, image) = listener(pod, port).unwrap_or_default();
    let (status, ctype, server, body) = if is_nginx(&image) {
        let index = matches!(path.split('?').next(), Some("/" | "/index.html"));
        if index {
            (
                "200 OK",
                "text/html",
                "nginx/1.27.3",
                NGINX_INDEX.to_string(),
            )
        } else {
            (
                "404 Not Found",
                "text/html",
                "nginx/1.27.3",
                NGINX_404.to_string(),
            )
        }
    } else {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
        (
            "200 OK",
            "text/plain; charset=utf-8",
            "rkube-simulated",
            format!("Hello from {pod_name} ({image}) on port {port}: {method} {path}\n"),
        )
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nServer: {server}\r\nDate: {now}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declared_ports_and_nginx_answer() {
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [
            {"name": "web", "image": "nginx:1.27"},
            {"name": "api", "image": "example/api", "ports": [{"containerPort": 8080}]}]}});
        assert_eq!(listener(&pod, 80).unwrap().0, "web");
        assert_eq!(listener(&pod, 8080).unwrap().0, "api");
        assert!(listener(&pod, 81).is_none());
        let get = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        assert_eq!(head_end(get), Some(get.len()));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
        let page = String::from_utf8(answer(&pod, 80, get, "now")).unwrap();
        assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
        assert!(page.contains("Content-Length: 615\r\n"), "{page}");
        assert!(page.ends_with(NGINX_INDEX));
        let missing =
            String::from_utf8(answer(&pod, 80, b"GET /x HTTP/1.1\r\n\r\n", "now")).unwrap();
        assert!(missing.starts_with("HTTP/1.1 404 Not Found"));
        let api =
            String::from_utf8(answer(&pod, 8080, b"HEAD /health HTTP/1.1\r\n\r\n", "now")).unwrap();
        assert!(api.ends_with("\r\n\r\n"), "HEAD has no body: {api}");
    }
}
