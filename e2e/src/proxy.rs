//! A TCP proxy between the operator and the API server that a scenario can cut or
//! black-hole.
//!
//! Cut, it drops every open connection and refuses new ones: the operator loses
//! the API server while the scenario, through its own client, goes on changing the
//! cluster. Hung, it keeps every connection open and forwards nothing, so requests
//! wait for their own timeouts instead of failing at once, as behind a dead route.
//! TLS passes through untouched (the server's certificate names 127.0.0.1, which is
//! where the proxy listens too).
//!
//! With several upstreams each new connection goes to the next one that accepts,
//! as a Service spreads connections over its ready endpoints.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::{AbortHandle, JoinHandle},
};

use crate::Result;

pub struct Proxy {
    port: u16,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

struct State {
    cut: AtomicBool,
    /// `true` while hung: nothing is forwarded either way.
    hung: watch::Sender<bool>,
    connections: Mutex<Vec<AbortHandle>>,
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Proxy> {
        Proxy::start_spread(vec![upstream]).await
    }

    /// Listens on a free loopback port; each connection goes to the first of
    /// `upstreams`, from a rotating start, that accepts it.
    pub async fn start_spread(upstreams: Vec<SocketAddr>) -> Result<Proxy> {
        if upstreams.is_empty() {
            return Err("a proxy needs at least one upstream".into());
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            cut: AtomicBool::new(false),
            hung: watch::channel(false).0,
            connections: Mutex::new(Vec::new()),
            upstreams,
            next: AtomicUsize::new(0),
        });
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if state.cut.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees the connection close
                    }
                    let forward = tokio::spawn(forward(state.clone(), client));
                    let mut open = state.connections.lock().expect("proxy lock");
                    open.retain(|c| !c.is_finished());
                    open.push(forward.abort_handle());
                }
            }
        });
        Ok(Proxy {
            port,
            state,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drops every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for c in self.state.connections.lock().expect("proxy lock").drain(..) {
            c.abort();
        }
    }

    /// Keeps every connection, open or new, silent until [`Proxy::restore`], which
    /// then closes them.
    pub fn hang(&self) {
        self.state.hung.send_replace(true);
    }

    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
        self.state.hung.send_replace(false);
    }
}

async fn forward(state: Arc<State>, mut client: TcpStream) {
    let mut hung = state.hung.subscribe();
    if *hung.borrow_and_update() {
        let _ = hung.wait_for(|h| !*h).await;
        return;
    }
    let Some(mut server) = connect(&state).await else {
        return;
    };
    let hang_started = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
        _ = hung.wait_for(|h| *h) => true,
    };
    if hang_started {
        // Both sockets stay open and unread until the hang ends.
        let _ = hung.wait_for(|h| !*h).await;
    }
}

async fn connect(state: &State) -> Option<TcpStream> {
    let n = state.upstreams.len();
    let start = state.next.fetch_add(1, Ordering::Relaxed);
    for i in 0..n {
        if let Ok(server) = TcpStream::connect(state.upstreams[(start + i) % n]).await {
            return Some(server);
        }
    }
    None
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A copy of `kubeconfig` at `to` whose server is `https://127.0.0.1:<port>`.
pub fn kubeconfig_through(kubeconfig: &std::path::Path, port: u16, to: &std::path::Path) -> Result {
    let text = std::fs::read_to_string(kubeconfig)?;
    let mut replaced = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("server:") {
            Some(_) => {
                replaced += 1;
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}server: https://127.0.0.1:{port}")
            }
            None => l.to_string(),
        })
        .collect();
    if replaced != 1 {
        return Err(format!(
            "{}: expected one server line, found {replaced}",
            kubeconfig.display()
        )
        .into());
    }
    std::fs::write(to, out.join("\n") + "\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An upstream that echoes what it reads.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(within, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn hung_connections_stay_open_and_silent_until_restored() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut open = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(
            round_trip(&mut open, Duration::from_secs(5))
                .await
                .as_deref(),
            Some(&b"ping"[..])
        );

        proxy.hang();
        // Neither the open connection nor a new one gets an answer, nor is closed.
        assert_eq!(
            round_trip(&mut open, Duration::from_millis(300)).await,
            None
        );
        let mut new = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut new, Duration::from_millis(300)).await, None);

        proxy.restore();
        // The hung connections are closed; a new one works again.
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), new.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        let mut again = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(
            round_trip(&mut again, Duration::from_secs(5))
                .await
                .as_deref(),
            Some(&b"ping"[..])
        );
    }

    #[tokio::test]
    async fn a_spread_proxy_skips_an_upstream_that_refuses() {
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let proxy = Proxy::start_spread(vec![dead, echo().await]).await.unwrap();
        for _ in 0..3 {
            let mut s = TcpStream::connect(("127.0.0.1", proxy.port()))
                .await
                .unwrap();
            assert_eq!(
                round_trip(&mut s, Duration::from_secs(5)).await.as_deref(),
                Some(&b"ping"[..])
            );
        }
    }
}
