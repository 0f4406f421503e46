//! Reading PEM certificates, and when they expire.

use std::path::Path;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Every certificate in a PEM file; an error names the file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// When the first certificate of `path` expires (seconds since the Unix epoch), if readable.
pub fn expiry(path: &Path) -> Option<i64> {
    let first = load_certs(path).ok()?.into_iter().next()?;
    let (_, cert) = x509_parser::parse_x509_certificate(first.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}
