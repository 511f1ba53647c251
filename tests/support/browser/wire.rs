//! The wire under the browser driver: a tiny HTTP/1.1 client on
//! `std::net::TcpStream` (chromedriver's W3C WebDriver endpoint) and a
//! base64 decoder for its screenshots. No other crates.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// A minimal HTTP/1.1 exchange with 127.0.0.1:`port` (JSON body if any):
/// returns the status and body, honouring `Content-Length`, chunked
/// transfer encoding, or EOF. `timeout` bounds each read and write.
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\nConnection: close\r\n");
    if body.is_some() || method == "POST" {
        request.push_str("Content-Type: application/json; charset=utf-8\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", payload.len()));
    }
    request.push_str("\r\n");
    request.push_str(&payload);
    http_exchange(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        request.as_bytes(),
        timeout,
    )
}

/// Sends the raw `request` bytes to `addr` on a fresh connection and reads
/// the response: status and body, as [`http_request`] does.
pub fn http_exchange(
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2).min(timeout))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    stream
        .write_all(request)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("sending request: {e}"))?;

    let mut reader = BufReader::new(stream);
    let io = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            format!("no response within {timeout:?}")
        } else {
            format!("reading response: {e}")
        }
    };
    let status_line = read_line(&mut reader).map_err(io)?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/"))
        .ok_or_else(|| format!("malformed status line {status_line:?}"))?;

    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    loop {
        let line = read_line(&mut reader).map_err(io)?;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("content-length") {
                content_length = Some(
                    value
                        .parse()
                        .map_err(|_| format!("bad Content-Length {value:?}"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }

    let mut body = Vec::new();
    if chunked {
        loop {
            let size_line = read_line(&mut reader).map_err(io)?;
            let size_hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| format!("bad chunk size {size_line:?}"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !read_line(&mut reader).map_err(io)?.is_empty() {}
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..]).map_err(io)?;
            read_line(&mut reader).map_err(io)?; // the CRLF after the chunk
        }
    } else if let Some(n) = content_length {
        body.resize(n, 0);
        reader.read_exact(&mut body).map_err(io)?;
    } else {
        reader.read_to_end(&mut body).map_err(io)?;
    }
    Ok((status, body))
}

/// One CRLF- (or LF-) terminated line without its terminator; EOF before
/// any byte is an error.
fn read_line(reader: &mut impl BufRead) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let n = reader.read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Decodes standard base64 (RFC 4648, `+/`, optional `=` padding); ASCII
/// whitespace is skipped.
pub fn base64_decode(input: &str) -> Result<Vec<u8>, String> {
    fn sextet(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some((c - b'A') as u32),
            b'a'..=b'z' => Some((c - b'a') as u32 + 26),
            b'0'..=b'9' => Some((c - b'0') as u32 + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    let mut padding = 0usize;
    let mut symbols = 0usize;
    for (i, &c) in input.as_bytes().iter().enumerate() {
        if c.is_ascii_whitespace() {
            continue;
        }
        if c == b'=' {
            padding += 1;
            symbols += 1;
            continue;
        }
        if padding > 0 {
            return Err(format!("base64: data after padding at byte {i}"));
        }
        let v = sextet(c).ok_or_else(|| format!("base64: invalid byte {c:#04x} at {i}"))?;
        symbols += 1;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if padding > 2 || (padding > 0 && symbols % 4 != 0) {
        return Err("base64: bad padding".to_owned());
    }
    if (symbols - padding) % 4 == 1 {
        return Err("base64: truncated input".to_owned());
    }
    Ok(out)
}
