//! `--api-qps`: the client `taint-operator run` builds holds requests back to
//! that many a second. A plain HTTP server on a local socket plays the API server
//! and notes when each request arrives; the client is the operator's own
//! (`run::client`, from a kubeconfig naming that server), so a limiter dropped
//! from it fails here.
//!
//! One test in this binary: it points KUBECONFIG at the fake server, which is
//! process-wide.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::ListParams};
use taint_operator::{run::client, telemetry::metrics::Metrics};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

const NODE_LIST: &str =
    r#"{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;

/// Serves an empty NodeList to every request, on kept-alive connections, and
/// records when each request arrived.
async fn fake_api_server() -> (u16, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // GETs only: a request is its header block.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        seen.lock().unwrap().push(Instant::now());
                        let response = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{NODE_LIST}",
                            NODE_LIST.len()
                        );
                        if conn.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (port, arrivals)
}

/// Sends `n` node lists at once through the operator's client with `qps`; the
/// arrival times at the server, from the first.
async fn burst(qps: u32, n: usize, arrivals: &Mutex<Vec<Instant>>) -> Vec<Duration> {
    arrivals.lock().unwrap().clear();
    let (client, _) = client(&Metrics::default(), qps)
        .await
        .expect("the operator's client from the test kubeconfig");
    let nodes: Api<Node> = Api::all(client);
    let lists = (0..n).map(|_| {
        let nodes = nodes.clone();
        async move { nodes.list(&ListParams::default()).await }
    });
    for listed in futures::future::join_all(lists).await {
        listed.expect("the fake API server answers every list");
    }
    let times = arrivals.lock().unwrap().clone();
    assert_eq!(times.len(), n, "every request reached the server once");
    let first = *times.iter().min().unwrap();
    let mut since: Vec<Duration> = times.iter().map(|t| *t - first).collect();
    since.sort();
    since
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_qps_spreads_a_burst_over_one_second_windows() {
    let (port, arrivals) = fake_api_server().await;
    let dir = std::env::temp_dir().join(format!("taint-operator-api-qps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: nobody\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: nobody}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    // SAFETY: the only test of this binary; nothing else reads the environment
    // while it is changed.
    unsafe {
        std::env::set_var("KUBECONFIG", &kubeconfig);
        std::env::remove_var("KUBERNETES_SERVICE_HOST");
    }

    // 5 a second: 11 requests go out in three windows, 5, 5 and 1. Only waits the
    // limiter imposes are bounded from below; a busy machine can only add to them.
    let limited = burst(5, 11, &arrivals).await;
    assert!(
        limited[5] >= Duration::from_millis(900),
        "--api-qps 5 lets at most 5 requests through in the first second: {limited:?}"
    );
    assert!(
        limited[4] < limited[5] - limited[4],
        "the first 5 go out together, the 6th a window later: {limited:?}"
    );
    assert!(
        limited[10] >= Duration::from_millis(1900),
        "the 11th request waits for the third window: {limited:?}"
    );

    // 0: no limit: the same burst is not held for a third window.
    let unlimited = burst(0, 11, &arrivals).await;
    assert!(
        unlimited[10] < Duration::from_millis(1900),
        "--api-qps 0 holds nothing back: {unlimited:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
