//! The server's thread: its own multi-thread tokio runtime and a hyper 1 HTTP/1.1 server on
//! 127.0.0.1 (port chosen by the OS), serving [`crate::http::handle`] with the state every
//! connection shares ([`crate::shared::Shared`], its writes starting [`crate::mig_manager`] and
//! [`crate::device_plugin`] runs).
//!
//! What it does: plain HTTP only (kube-rs speaks `http://` when the kubeconfig's server says
//! so); stops when [`Server::stop`] runs (from `FakeKube`'s `Drop`), dropping every connection,
//! watch and scripted mig-manager task, and joins the thread.
//!
//! What it does not do: no TLS, no HTTP/2, no graceful draining of open requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

use crate::shared::Shared;
use crate::store::{Controller, Trigger};
use crate::{device_plugin, mig_manager};

/// Starts the scripted controller a trigger is for.
fn start_controller(shared: Arc<Shared>, trigger: Trigger) {
    match trigger.controller {
        Controller::MigManager => mig_manager::start(shared, trigger),
        Controller::DevicePlugin => device_plugin::start(shared, trigger),
    }
}

/// The running server.
pub(crate) struct Server {
    pub(crate) shared: Arc<Shared>,
    pub(crate) addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds 127.0.0.1:0 and serves on a thread of its own.
    pub(crate) fn start(token: String) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fake-kube")
            .enable_all()
            .build()
            .expect("fake-kube: a tokio runtime");
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("fake-kube: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("fake-kube: non-blocking listener");
        let addr = listener.local_addr().expect("fake-kube: local address");
        let shared = Arc::new(Shared::new(
            runtime.handle().clone(),
            token,
            start_controller,
        ));
        let (stop, mut stopped) = oneshot::channel::<()>();
        let served = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fake-kube-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("fake-kube: tokio listener");
                    loop {
                        tokio::select! {
                            _ = &mut stopped => break,
                            accepted = listener.accept() => {
                                let Ok((stream, _)) = accepted else { continue };
                                let shared = Arc::clone(&served);
                                tokio::spawn(async move {
                                    let service = service_fn(move |req| crate::http::handle(Arc::clone(&shared), req));
                                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                                });
                            }
                        }
                    }
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .expect("fake-kube: a server thread");
        Server {
            shared,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops serving and joins the thread.
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
