//! The key that encrypts Secrets at rest (kube-apiserver's EncryptionConfiguration), kept in the
//! state directory as `kubernetes/encryption-key` (base64 of 32 random bytes, 0600).
//!
//! Invariant: generated once and never replaced: a new key would leave every Secret written with
//! the old one unreadable. A file that does not hold a 32-byte key is a refusal, not a reason to
//! generate another.

use std::fmt;

use base64::Engine as _;
use rand::RngCore as _;

use crate::state::{StateDir, StateError, StateView};

/// Path of the key, relative to the state directory.
pub const ENCRYPTION_KEY: &str = "kubernetes/encryption-key";

/// 32 bytes for the `secretbox` provider. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionKey([u8; 32]);

impl EncryptionKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        EncryptionKey(bytes)
    }
    /// The base64 text the EncryptionConfiguration holds. Do not log it.
    pub fn expose_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptionKey([redacted])")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{path} does not hold a base64 32-byte key; it is never replaced automatically (Secrets encrypted with it would become unreadable): restore it from a backup of the state directory")]
    Unusable { path: String },
}

/// Reads the cluster's encryption key, generating and storing it (0600) on first use.
pub fn ensure_encryption_key(state: &StateDir) -> Result<EncryptionKey, SecretsError> {
    let (key, new) = load_or_generate(&state.file(ENCRYPTION_KEY))?;
    if new {
        state.write_secret(ENCRYPTION_KEY, key_file_text(&key).as_bytes())?;
    }
    Ok(key)
}

/// [`ensure_encryption_key`] for a read-only command: the stored key, or (none yet) one made in
/// memory for this run only, never written.
pub fn preview_encryption_key(view: &StateView) -> Result<EncryptionKey, SecretsError> {
    Ok(load_or_generate(&view.file(ENCRYPTION_KEY))?.0)
}

/// The EncryptionConfiguration hactl writes to every control-plane host
/// (`/etc/hactl/kubernetes/encryption-config.yaml`) for `key`.
pub fn encryption_config(key: &EncryptionKey) -> Result<String, crate::render::RenderError> {
    crate::render::render(
        "encryption-config.yaml",
        &serde_json::json!({ "key": key.expose_base64() }),
    )
}

/// The key of an EncryptionConfiguration read back from a control-plane host (`hactl adopt`):
/// `Some` only when the text is exactly what [`encryption_config`] writes for that key, so a
/// file someone edited (another provider, a second key) is never half-understood. Never logs
/// the text.
pub fn key_from_config(text: &str) -> Option<EncryptionKey> {
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("secret:"))?
        .trim();
    let bytes = base64::engine::general_purpose::STANDARD.decode(value).ok()?;
    let key = EncryptionKey(bytes.try_into().ok()?);
    (encryption_config(&key).ok()? == text).then_some(key)
}

/// The text `kubernetes/encryption-key` holds for `key` (what [`ensure_encryption_key`] writes).
pub fn key_file_text(key: &EncryptionKey) -> String {
    format!("{}\n", key.expose_base64())
}

/// The key at `path`, or a new one (`true`) when there is none.
fn load_or_generate(path: &std::path::Path) -> Result<(EncryptionKey, bool), SecretsError> {
    match crate::bounded::read_to_string(path, crate::bounded::TEXT) {
        Ok(text) => {
            let unusable = || SecretsError::Unusable {
                path: path.display().to_string(),
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|_| unusable())?;
            let key: [u8; 32] = bytes.try_into().map_err(|_| unusable())?;
            Ok((EncryptionKey(key), false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            rand::rng().fill_bytes(&mut key);
            Ok((EncryptionKey(key), true))
        }
        Err(e) => Err(SecretsError::State(StateError::Io(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The read-back of `hactl adopt`: the host's file gives back the very key (and the state
    /// file `up` would read), and a file hactl did not write gives nothing.
    #[test]
    fn the_key_is_read_back_from_the_configuration_hactl_wrote_and_from_nothing_else() {
        let key = EncryptionKey::from_bytes([7u8; 32]);
        let text = encryption_config(&key).unwrap();
        assert_eq!(key_from_config(&text), Some(key.clone()));
        assert_eq!(key_file_text(&key), format!("{}\n", key.expose_base64()));
        let edited = text.replace("- identity: {}", "- aescbc: {}\n      - identity: {}");
        assert_eq!(key_from_config(&edited), None, "an edited file");
        let short = text.replace(&key.expose_base64(), "c2hvcnQ=");
        assert_eq!(key_from_config(&short), None, "not 32 bytes");
        assert_eq!(key_from_config("kind: Secret\n"), None);
        // The key reaches no Debug output.
        assert!(!format!("{:?}", key_from_config(&text)).contains(&key.expose_base64()));
    }

    #[test]
    fn generated_once_kept_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let state = StateDir::open(&root).unwrap();
        let first = ensure_encryption_key(&state).unwrap();
        let second = ensure_encryption_key(&state).unwrap();
        assert_eq!(first, second);
        let path = state.file(ENCRYPTION_KEY);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(format!("{first:?}"), "EncryptionKey([redacted])");

        std::fs::write(&path, "not a key\n").unwrap();
        let err = ensure_encryption_key(&state).unwrap_err().to_string();
        assert!(err.contains("never replaced automatically"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "not a key\n",
            "left as it was"
        );
    }
}
