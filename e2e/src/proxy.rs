//! A TCP proxy between the operator and the API server that a scenario can cut.
//!
//! Cut, it drops every open connection and refuses new ones: the operator loses
//! the API server while the scenario, through its own client, goes on changing the
//! cluster. TLS passes through untouched (the server's certificate names
//! 127.0.0.1, which is where the proxy listens too).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::{AbortHandle, JoinHandle},
};

use crate::Result;

pub struct Proxy {
    port: u16,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    cut: AtomicBool,
    connections: Mutex<Vec<AbortHandle>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State::default());
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if state.cut.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees the connection close
                    }
                    let forward = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
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

    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
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
