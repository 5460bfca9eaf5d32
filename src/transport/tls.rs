//! TLS: the listener's acceptor from the PEM files of `[broker.tls]`, and `gen-cert`'s
//! development certificates (a CA to trust once, and a server certificate it signs).
//!
//! rustls with the `ring` provider; TLS 1.2 and 1.3, no client certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Why TLS could not be set up. Messages name the file and never show key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{}: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificate and key.
    #[error("the TLS certificate and key do not make a server configuration: {0}")]
    Config(#[from] rustls::Error),
    /// A certificate could not be generated.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A generated file could not be written.
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The acceptor for `[broker.tls]`: its certificate chain and private key.
///
/// # Errors
/// A [`TlsError`] naming the file that cannot be read or parsed, or rustls's refusal.
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let pem_error = |path: &Path, reason: String| TlsError::Pem {
        path: path.to_owned(),
        reason,
    };
    let certificates = CertificateDer::pem_file_iter(&config.cert)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_error(&config.cert, format!("cannot read certificates: {e}")))?;
    if certificates.is_empty() {
        return Err(pem_error(&config.cert, "holds no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&config.key)
        .map_err(|e| pem_error(&config.key, format!("cannot read a private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certificates, key)?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// The files [`generate_dev_certificates`] writes, in `DIR`.
pub const DEV_CERTIFICATE_FILES: [&str; 3] = ["ca.pem", "server.pem", "server-key.pem"];

/// Writes a development CA (`ca.pem`) and a server certificate it signs for `hosts`
/// (`server.pem`, with `server-key.pem`) into `dir`, created if absent. Host names become DNS
/// names, IP addresses IP addresses, in the certificate's subject alternative names. The CA's
/// key is not kept: nothing else can be signed with it. Returns the paths written.
///
/// # Errors
/// A [`TlsError`] when a certificate cannot be made or a file cannot be written.
pub fn generate_dev_certificates(hosts: &[String], dir: &Path) -> Result<Vec<PathBuf>, TlsError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Tidebus development CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;

    let mut server_params = CertificateParams::new(hosts.to_vec())?;
    let first = hosts.first().map_or("localhost", String::as_str);
    server_params
        .distinguished_name
        .push(DnType::CommonName, first);
    server_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate()?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let server = server_params.signed_by(&server_key, &issuer)?;

    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let contents = [ca.pem(), server.pem(), server_key.serialize_pem()];
    let mut written = Vec::new();
    for (name, text) in DEV_CERTIFICATE_FILES.iter().zip(contents) {
        let path = dir.join(name);
        write_private(&path, &text).map_err(|source| TlsError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// Writes `text` to a file only its owner may read (the key is among them).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_make_an_acceptor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let written = generate_dev_certificates(&hosts, dir.path()).expect("generated");
        assert_eq!(written.len(), 3);
        let config = TlsConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            cert: dir.path().join("server.pem"),
            key: dir.path().join("server-key.pem"),
        };
        acceptor(&config).expect("acceptor");
        let swapped = TlsConfig {
            key: dir.path().join("server.pem"),
            ..config
        };
        let error = acceptor(&swapped).err().expect("no key there").to_string();
        assert!(error.contains("server.pem"), "{error}");
    }
}
