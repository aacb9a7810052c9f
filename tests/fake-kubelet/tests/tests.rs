//! The fake kubelet over its own socket, through a client generated from the same proto: it
//! answers `List` with the response it was given, changes it, fails with a status, hangs, counts
//! calls, and removes its socket when dropped.

use std::path::Path;
use std::time::Duration;

use tessera_fake_kubelet::proto::ListPodResourcesRequest;
use tessera_fake_kubelet::proto::pod_resources_lister_client::PodResourcesListerClient;
use tessera_fake_kubelet::{FakeKubelet, pod, response};

fn list(path: &Path) -> Result<Vec<String>, tonic::Status> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let path = path.to_path_buf();
    rt.block_on(async move {
        let channel = tonic::transport::Endpoint::from_static("http://[::]:50051")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let mut client = PodResourcesListerClient::new(channel);
        let call = client.list(ListPodResourcesRequest {});
        let answer = tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .map_err(|_| tonic::Status::deadline_exceeded("timed out"))??;
        Ok(answer
            .into_inner()
            .pod_resources
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect())
    })
}

#[test]
fn answers_changes_fails_hangs_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let fake = FakeKubelet::start(
        &socket,
        response(vec![pod(
            "train-0",
            "ml",
            &[("main", "nvidia.com/gpu", &["GPU-a"])],
        )]),
    )
    .unwrap();
    assert_eq!(list(&socket).unwrap(), ["ml/train-0"]);
    fake.set_response(response(vec![
        pod("a", "x", &[("c", "nvidia.com/gpu", &["GPU-a"])]),
        pod("b", "y", &[("c", "nvidia.com/mig-1g.10gb", &["MIG-b"])]),
    ]));
    assert_eq!(list(&socket).unwrap(), ["x/a", "y/b"]);
    fake.fail(tonic::Code::Internal, "broken");
    let e = list(&socket).unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::Internal, "broken"));
    fake.hang();
    assert_eq!(
        list(&socket).unwrap_err().code(),
        tonic::Code::DeadlineExceeded
    );
    fake.answer();
    assert_eq!(list(&socket).unwrap(), ["x/a", "y/b"]);
    assert_eq!(fake.calls(), 5);
    // Dropped while a call hangs: the server stops and the socket goes.
    fake.hang();
    assert!(list(&socket).is_err());
    drop(fake);
    assert!(!socket.exists());
    assert!(list(&socket).is_err());
}

#[test]
fn pod_groups_devices_by_container() {
    let p = pod(
        "p",
        "n",
        &[
            ("a", "nvidia.com/gpu", &["GPU-1", "GPU-2"]),
            ("a", "nvidia.com/mig-1g.10gb", &["MIG-1"]),
            ("b", "nvidia.com/gpu", &["GPU-3"]),
        ],
    );
    assert_eq!(p.containers.len(), 2);
    assert_eq!(p.containers[0].devices.len(), 2);
    assert_eq!(p.containers[0].devices[0].device_ids, ["GPU-1", "GPU-2"]);
    assert_eq!(p.containers[1].name, "b");
}
