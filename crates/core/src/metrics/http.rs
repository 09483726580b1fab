//! Just enough HTTP/1.x for a metrics endpoint, pure: reading a request head (bounded), and the
//! answer to it. `GET`/`HEAD /metrics` is the scrape, `/` a pointer to it, anything else 404,
//! other methods 405; every answer closes the connection.

use super::exposition::CONTENT_TYPE;

/// The most bytes of a request head (request line and headers) read before answering 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// What the bytes read so far make.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet.
    Incomplete,
    /// An answer is ready (whatever the request was).
    Answer(Route),
}

/// What to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Metrics { head_only: bool },
    Index { head_only: bool },
    NotFound,
    MethodNotAllowed,
    BadRequest,
    TooLarge,
}

/// Reads a request head from what arrived so far.
pub fn parse(received: &[u8]) -> Parsed {
    let Some(end) = head_end(received) else {
        return if received.len() >= MAX_REQUEST_BYTES {
            Parsed::Answer(Route::TooLarge)
        } else {
            Parsed::Incomplete
        };
    };
    if end > MAX_REQUEST_BYTES {
        return Parsed::Answer(Route::TooLarge);
    }
    let Ok(head) = std::str::from_utf8(&received[..end]) else {
        return Parsed::Answer(Route::BadRequest);
    };
    // A client may send empty lines before the request line (RFC 9112, 2.2).
    let request_line = head.lines().map(str::trim).find(|line| !line.is_empty());
    let mut words = request_line.unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Parsed::Answer(Route::BadRequest);
    };
    if !version.starts_with("HTTP/1.") {
        return Parsed::Answer(Route::BadRequest);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Parsed::Answer(Route::MethodNotAllowed),
    };
    Parsed::Answer(match path_of(target) {
        Some("/metrics") => Route::Metrics { head_only },
        Some("/") => Route::Index { head_only },
        Some(_) => Route::NotFound,
        None => Route::BadRequest,
    })
}

/// Where the head ends (after its blank line), when it has.
fn head_end(received: &[u8]) -> Option<usize> {
    let searched = &received[..received.len().min(MAX_REQUEST_BYTES + 4)];
    let crlf = searched
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4);
    let lf = searched
        .windows(2)
        .position(|window| window == b"\n\n")
        .map(|at| at + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The path of a request target: origin form (`/metrics?x=1`) or absolute form
/// (`http://host:9400/metrics`).
fn path_of(target: &str) -> Option<&str> {
    let target = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |at| &rest[at..]),
        None => target,
    };
    let path = target.split(['?', '#']).next().unwrap_or_default();
    path.starts_with('/').then_some(path)
}

/// The answer's head and whether the scrape body follows it. `body_len` is the scrape body's
/// length, `None` when no body is ready (the service is not reachable).
pub fn answer(route: Route, body_len: Option<usize>) -> (Vec<u8>, bool) {
    const INDEX: &str = "<html><head><title>gputune exporter</title></head><body><h1>gputune exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";
    let (status, content_type, text, with_body, head_only): (&str, &str, &str, bool, bool) =
        match (route, body_len) {
            (Route::Metrics { head_only }, Some(_)) => {
                ("200 OK", CONTENT_TYPE, "", true, head_only)
            }
            (Route::Metrics { head_only }, None) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                "gputune cannot reach its tuning service; it is trying again.\n",
                false,
                head_only,
            ),
            (Route::Index { head_only }, _) => (
                "200 OK",
                "text/html; charset=utf-8",
                INDEX,
                false,
                head_only,
            ),
            (Route::NotFound, _) => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "Not found: the metrics are at /metrics.\n",
                false,
                false,
            ),
            (Route::MethodNotAllowed, _) => (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                "Only GET and HEAD are served.\n",
                false,
                false,
            ),
            (Route::BadRequest, _) => (
                "400 Bad Request",
                "text/plain; charset=utf-8",
                "Bad request.\n",
                false,
                false,
            ),
            (Route::TooLarge, _) => (
                "431 Request Header Fields Too Large",
                "text/plain; charset=utf-8",
                "The request head is longer than 8 KiB.\n",
                false,
                false,
            ),
        };
    let length = if with_body {
        body_len.unwrap_or_default()
    } else {
        text.len()
    };
    let allow = if route == Route::MethodNotAllowed {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    if !head_only && !with_body {
        head.extend_from_slice(text.as_bytes());
    }
    (head, with_body && !head_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(request: &str) -> Parsed {
        parse(request.as_bytes())
    }

    #[test]
    fn requests_are_routed() {
        let metrics = Parsed::Answer(Route::Metrics { head_only: false });
        assert_eq!(route("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), metrics);
        assert_eq!(route("GET /metrics?a=b HTTP/1.0\n\n"), metrics);
        assert_eq!(
            route("\r\nGET http://h:9400/metrics HTTP/1.1\r\n\r\n"),
            metrics
        );
        assert_eq!(
            route("HEAD /metrics HTTP/1.1\r\n\r\n"),
            Parsed::Answer(Route::Metrics { head_only: true })
        );
        assert_eq!(
            route("GET / HTTP/1.1\r\n\r\n"),
            Parsed::Answer(Route::Index { head_only: false })
        );
        assert_eq!(
            route("GET /etc/passwd HTTP/1.1\r\n\r\n"),
            Parsed::Answer(Route::NotFound)
        );
        assert_eq!(
            route("GET /metricsx HTTP/1.1\r\n\r\n"),
            Parsed::Answer(Route::NotFound)
        );
        assert_eq!(
            route("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
            Parsed::Answer(Route::MethodNotAllowed)
        );
        for bad in [
            "GET /metrics\r\n\r\n",
            "GET /metrics SPDY/3\r\n\r\n",
            "GET metrics HTTP/1.1\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "\u{1b}[2J\r\n\r\n",
        ] {
            assert_eq!(route(bad), Parsed::Answer(Route::BadRequest), "{bad:?}");
        }
        assert_eq!(
            parse(b"GET /\xff HTTP/1.1\r\n\r\n"),
            Parsed::Answer(Route::BadRequest)
        );
    }

    #[test]
    fn a_head_is_read_until_its_blank_line_and_no_further_than_the_limit() {
        assert_eq!(
            route("GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Parsed::Incomplete
        );
        assert_eq!(route(""), Parsed::Incomplete);
        let long = format!(
            "GET /metrics HTTP/1.1\r\nX: {}",
            "a".repeat(MAX_REQUEST_BYTES)
        );
        assert_eq!(route(&long), Parsed::Answer(Route::TooLarge));
        let complete_but_long = format!("{long}\r\n\r\n");
        assert_eq!(route(&complete_but_long), Parsed::Answer(Route::TooLarge));
    }

    #[test]
    fn answers_carry_their_length_and_close() {
        let (head, body_follows) = answer(Route::Metrics { head_only: false }, Some(1234));
        let head = String::from_utf8(head).unwrap_or_default();
        assert!(body_follows);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Length: 1234\r\n"), "{head}");
        assert!(
            head.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{head}"
        );
        assert!(head.ends_with("Connection: close\r\n\r\n"), "{head}");
        let (head, body_follows) = answer(Route::Metrics { head_only: true }, Some(1234));
        assert!(!body_follows);
        assert!(String::from_utf8_lossy(&head).contains("Content-Length: 1234\r\n"));
        let (head, body_follows) = answer(Route::Metrics { head_only: false }, None);
        assert!(!body_follows);
        assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 503 "));
        let (head, _) = answer(Route::MethodNotAllowed, Some(1));
        let head = String::from_utf8_lossy(&head).to_string();
        assert!(head.contains("Allow: GET, HEAD\r\n"), "{head}");
        let (head, _) = answer(Route::NotFound, Some(1));
        let head = String::from_utf8_lossy(&head).to_string();
        let (headers, text) = head.split_once("\r\n\r\n").unwrap_or_default();
        assert!(headers.contains(&format!("Content-Length: {}", text.len())));
    }
}
