//! Helpers: a kube-rs client configured from the kubeconfig the server writes, and a poll loop.

use std::time::{Duration, Instant};

use fake_kube::FakeKube;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client from [`FakeKube::write_kubeconfig`]'s file, read as the `tessera` binary reads one.
pub async fn client(kube: &FakeKube) -> kube::Client {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&path);
    let kc = Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        kube.url()
    );
    kube::Client::try_from(config).unwrap()
}

/// The `Status` of a kube-rs API error.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

/// Polls `f` until it returns Some, or panics after `secs`.
pub async fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
