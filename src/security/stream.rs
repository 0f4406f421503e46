//! A connection to a broker: plain TCP or TLS over TCP.
//!
//! An enum rather than a boxed trait object, so that the plaintext path, the common one on a
//! sidecar's loopback and inside a cluster's network, keeps splitting the socket without a
//! lock ([`BrokerStream::split`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub enum BrokerStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reading half of a [`BrokerStream`].
pub type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a [`BrokerStream`].
pub type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

impl BrokerStream {
    /// Splits the stream for a reader task and a writer task.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            BrokerStream::Plain(tcp) => {
                let (r, w) = tcp.into_split();
                (Box::new(r), Box::new(w))
            }
            BrokerStream::Tls(tls) => {
                let (r, w) = tokio::io::split(*tls);
                (Box::new(r), Box::new(w))
            }
        }
    }
}

impl AsyncRead for BrokerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BrokerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
