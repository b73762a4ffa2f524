//! Certificates for the TLS tests, made fresh on every run: a CA, a server
//! certificate for `localhost` signed by it, a client certificate signed by
//! it, and the files `redis-server` reads them from.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

pub struct TestPki {
    dir: PathBuf,
    pub ca_pem: String,
    pub client_chain_pem: String,
    pub client_key_pem: String,
}

impl TestPki {
    /// A CA and certificates signed by it. The server's names are exactly
    /// `server_names` (e.g. `localhost`; an IP address becomes an IP name).
    pub fn new(server_names: &[&str]) -> Self {
        static RUN: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "inflight-tls-{}-{}",
            std::process::id(),
            RUN.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a directory for test certificates");

        let ca = certificate_authority("inflight test CA");
        let server = leaf(server_names, ExtendedKeyUsagePurpose::ServerAuth, &ca);
        let client = leaf(&["inflight-test-client"], ExtendedKeyUsagePurpose::ClientAuth, &ca);
        for (name, pem) in [
            ("ca.pem", ca.pem()),
            ("server.pem", server.0.clone()),
            ("server.key", server.1.clone()),
        ] {
            std::fs::write(dir.join(name), pem).expect("write a test certificate");
        }
        Self {
            dir,
            ca_pem: ca.pem(),
            client_chain_pem: client.0,
            client_key_pem: client.1,
        }
    }

    /// A CA that signed nothing of this PKI: trusting it alone must fail.
    pub fn unrelated_ca_pem() -> String {
        certificate_authority("some other CA").pem()
    }

    pub fn file(&self, name: &str) -> String {
        path_text(&self.dir.join(name))
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn certificate_authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("self-sign the CA")
}

/// `(certificate PEM, private key PEM)` signed by `ca`.
fn leaf(names: &[&str], purpose: ExtendedKeyUsagePurpose, ca: &CertifiedIssuer<'static, KeyPair>) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names.clone()).expect("leaf parameters");
    params.distinguished_name.push(DnType::CommonName, names[0].clone());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, ca).expect("sign the leaf");
    (cert.pem(), key.serialize_pem())
}

fn path_text(path: &Path) -> String {
    path.to_str().expect("a UTF-8 temporary path").to_string()
}
