//! The pre-flight checks' unit tests.

use super::*;

#[derive(Debug, thiserror::Error)]
#[error("outer: {source}")]
struct Repeats {
    source: std::io::Error,
}

#[test]
fn a_security_setting_this_build_lacks_is_named() {
    let mut config = Config::defaults().expect("defaults");
    assert!(check_security(&config).ok, "plaintext");
    let set = |config: &mut Config, key: &str, value: &str| {
        config
            .kafka
            .librdkafka
            .insert(key.into(), toml::Value::String(value.into()));
    };
    set(&mut config, "security.protocol", "SASL_SSL");
    set(&mut config, "sasl.mechanism", "SCRAM-SHA-512");
    let check = check_security(&config);
    assert!(
        check.ok && check.detail.contains("ssl") && check.detail.contains("sasl_scram"),
        "{check}"
    );
    set(&mut config, "sasl.mechanism", "GSSAPI");
    let check = check_security(&config);
    assert!(!check.ok && check.detail.contains("sasl_gssapi"), "{check}");
}

#[test]
fn error_text_states_each_cause_once() {
    let err = Repeats {
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
    };
    assert_eq!(error_text(&err), "outer: gone");
    let wrapped = anyhow::Error::new(err).context("loading");
    assert_eq!(error_text(wrapped.as_ref()), "loading: outer: gone");
}

#[test]
fn a_new_sled_store_is_recognised_by_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    assert!(!store_present(&path));
    {
        let _store = crate::engine::store::Store::open(&path, 8).unwrap();
    }
    assert!(
        store_present(&path),
        "sled wrote conf and db: {:?}",
        std::fs::read_dir(&path).map(|d| d.count())
    );
    assert!(!store_present(dir.path()));
}

#[test]
fn store_check_refuses_a_directory_of_other_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    let mut config = Config::defaults().unwrap();
    config.store.path = dir.path().to_path_buf();
    assert!(!check_store(&config).ok);
    config.store.path = dir.path().join("new");
    assert!(check_store(&config).ok);
}
