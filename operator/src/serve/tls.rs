//! Serving certificates for the webhook and secure metrics servers: from PEM
//! files (reloaded when they rotate), or made up at start when none are given.

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use axum_server::tls_rustls::RustlsConfig;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot load TLS certificate {cert} / key {key}: {source}")]
    Load {
        cert: PathBuf,
        key: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make a self-signed certificate for {names:?}: {message}")]
    SelfSigned { names: Vec<String>, message: String },
}

/// The ring provider, once per process, whichever server starts first.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A server configuration from PEM files, and a task that reloads them when they
/// change (cert-manager or a Secret rotating them in place).
pub async fn from_files(cert: &Path, key: &Path) -> Result<RustlsConfig, TlsError> {
    install_crypto_provider();
    let tls = RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|source| TlsError::Load {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            source,
        })?;
    tokio::spawn(reload_on_change(
        tls.clone(),
        cert.to_path_buf(),
        key.to_path_buf(),
    ));
    Ok(tls)
}

/// A configuration with a certificate made up now for `names`, valid until the
/// process ends. For clients that skip verification or pin nothing (Prometheus
/// scraping pods with `insecureSkipVerify`), where what matters is that the
/// bearer token never crosses the network in the clear.
pub async fn self_signed(names: Vec<String>) -> Result<RustlsConfig, TlsError> {
    install_crypto_provider();
    let failed = |message: String| TlsError::SelfSigned {
        names: names.clone(),
        message,
    };
    let certified =
        rcgen::generate_simple_self_signed(names.clone()).map_err(|e| failed(e.to_string()))?;
    RustlsConfig::from_pem(
        certified.cert.pem().into_bytes(),
        certified.signing_key.serialize_pem().into_bytes(),
    )
    .await
    .map_err(|e| failed(e.to_string()))
}

async fn reload_on_change(tls: RustlsConfig, cert: PathBuf, key: PathBuf) {
    let stamp = |p: &PathBuf| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    let mut seen = (stamp(&cert), stamp(&key));
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = (stamp(&cert), stamp(&key));
        if now == seen {
            continue;
        }
        match tls.reload_from_pem_file(&cert, &key).await {
            Ok(()) => {
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                seen = now;
            }
            // A half-written pair during rotation: try again next tick.
            Err(e) => {
                tracing::warn!(cert = %cert.display(), error = %e, "TLS certificate reload failed; retrying")
            }
        }
    }
}
