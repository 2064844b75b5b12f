//! `Status` bodies for the answers hyper writes by itself.
//!
//! A request hyper cannot parse (a request line over its 64 KiB URI limit,
//! too large a header block, a malformed request line) never reaches the
//! router: hyper answers `414`, `431` or `400` with an empty body and closes
//! the connection. Every error a Kubernetes client sees should be a
//! `Status`, so the connection's writer recognizes that automatic answer
//! (an HTTP/1.1 4xx head with `content-length: 0`, which the router never
//! writes: its errors all carry a body) and writes a `Status` in its place.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Wraps a connection's stream.
pub struct StatusOnParseError<T> {
    inner: T,
    /// The replacement being written, how much of it is out, and the length
    /// of the automatic answer it stands for (what the writer is told).
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<T> StatusOnParseError<T> {
    pub fn new(inner: T) -> Self {
        StatusOnParseError {
            inner,
            pending: None,
        }
    }
}

/// The `Status` answer for hyper's automatic answer `head`, if it is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    let end = text.find("\r\n\r\n")?;
    if end + 4 != text.len()
        || !text[..end]
            .to_ascii_lowercase()
            .contains("\r\ncontent-length: 0")
    {
        return None;
    }
    let (reason, message) = match code {
        400 => ("BadRequest", "the request could not be parsed"),
        414 => (
            "RequestURITooLong",
            "the request line is longer than the server accepts (64 KiB)",
        ),
        431 => (
            "RequestHeaderFieldsTooLarge",
            "the request headers are larger than the server accepts",
        ),
        _ => return None,
    };
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string()
        + "\n";
    let phrase = rest[3..].split("\r\n").next().unwrap_or_default();
    Some(
        format!(
            "HTTP/1.1 {code}{phrase}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{status}",
            status.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for StatusOnParseError<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StatusOnParseError<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none()
            && buf.starts_with(b"HTTP/1.1 4")
            && let Some(answer) = replacement(buf)
        {
            this.pending = Some((answer, 0, buf.len()));
        }
        let Some((answer, written, stands_for)) = &mut this.pending else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        while *written < answer.len() {
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &answer[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let n = *stands_for;
        this.pending = None;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let head = bufs.iter().find(|b| !b.is_empty());
        if self.pending.is_some() || head.is_some_and(|b| b.starts_with(b"HTTP/1.1 4")) {
            // Rare (an error answer): look at it whole.
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            return self.poll_write(cx, &all);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_empty_automatic_answers_are_replaced() {
        let auto = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(replacement(auto).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{out}");
        let body: serde_json::Value =
            serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["code"], 414);
        assert_eq!(body["kind"], "Status");
        // The router's own errors have bodies and are left alone.
        let own = b"HTTP/1.1 404 Not Found\r\ncontent-length: 120\r\n\r\n";
        assert!(replacement(own).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}";
        assert!(replacement(with_body).is_none());
    }
}
