//! `rediss://`: the TCP connector wrapped in TLS by rustls.
//!
//! The crypto provider is named explicitly (ring) rather than taken from the
//! process default, so that an application that also links another provider
//! cannot make `connect` panic on an ambiguous default.

use std::io;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use inflight_core::Endpoint;

use crate::connector::{tcp_endpoint, Connector, TcpConnector};
use crate::error::ConnectError;

/// What a `rediss://` connection trusts and presents; set through the builder.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// PEM CA certificates that replace Mozilla's root set (webpki-roots).
    pub roots_pem: Option<Vec<u8>>,
    /// PEM certificate chain and private key, for servers with `tls-auth-clients yes`.
    pub client_auth: Option<(Vec<u8>, Vec<u8>)>,
}

/// Sizes only: the private key never appears in a print or a log.
impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pem = |bytes: &Vec<u8>| format!("<{} bytes of PEM>", bytes.len());
        f.debug_struct("TlsOptions")
            .field("roots_pem", &self.roots_pem.as_ref().map(pem))
            .field(
                "client_auth",
                &self
                    .client_auth
                    .as_ref()
                    .map(|(chain, _)| (pem(chain), "<redacted key>")),
            )
            .finish()
    }
}

/// Opens TCP, then runs the TLS handshake, verifying the server's
/// certificate against the URL's host name (or IP address).
#[derive(Clone)]
pub(crate) struct TlsConnector {
    tls: tokio_rustls::TlsConnector,
    tcp: TcpConnector,
}

impl TlsConnector {
    pub fn new(options: &TlsOptions, tcp: TcpConnector) -> Result<Self, ConnectError> {
        let roots = match &options.roots_pem {
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(pem, "CA certificates")? {
                    roots
                        .add(cert)
                        .map_err(|e| invalid(format!("a CA certificate was refused: {e}")))?;
                }
                roots
            }
            None => RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &options.client_auth {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => {
                let chain = certificates(chain, "client certificate chain")?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| invalid(format!("the client private key is not usable PEM: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid(format!("the client certificate and key do not fit: {e}")))?
            }
        };
        Ok(Self {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            tcp,
        })
    }
}

impl Connector for TlsConnector {
    type Io = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

    async fn connect(&self, endpoint: &Endpoint) -> io::Result<Self::Io> {
        let (host, _) = tcp_endpoint(endpoint)?;
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a name a TLS certificate can be checked against"),
            )
        })?;
        let tcp = self.tcp.connect(endpoint).await?;
        self.tls
            .connect(name, tcp)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))
    }
}

/// Every certificate in `pem`; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ConnectError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("the {what} are not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(format!("no certificate found in the {what}")));
    }
    Ok(certs)
}

fn invalid(reason: String) -> ConnectError {
    ConnectError::Tls { reason }
}
