//! One connection's byte stream, plaintext or TLS, whichever side opened it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Reading half of a [`Stream`].
pub type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// Writing half of a [`Stream`].
pub type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    /// Accepted by a TLS server port.
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// Opened by a TLS client.
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(stream) => stream,
            Stream::Server(stream) => stream.get_ref().0,
            Stream::Client(stream) => stream.get_ref().0,
        }
    }

    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// Separate halves for a reader task and a writer task. Plaintext splits the socket
    /// itself; TLS shares one session between the halves (tokio's split, a lock per call).
    pub fn into_halves(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(stream) => {
                let (read, write) = stream.into_split();
                (Box::new(read), Box::new(write))
            }
            tls => {
                let (read, write) = tokio::io::split(tls);
                (Box::new(read), Box::new(write))
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Server(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            Stream::Client(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Server(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            Stream::Client(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Server(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            Stream::Client(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Server(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            Stream::Client(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Stream::Server(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Client(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(stream) => stream.is_write_vectored(),
            Stream::Server(stream) => stream.is_write_vectored(),
            Stream::Client(stream) => stream.is_write_vectored(),
        }
    }
}
