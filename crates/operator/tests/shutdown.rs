//! SIGTERM ends the operator promptly and cleanly (exit 0) whatever it is doing: starting,
//! waiting for the Lease, right after taking it, while its caches sync, converging, idle, and
//! with an apiserver that does not answer. A replica that does not stop holds the Lease, and so
//! all the work, until the kubelet kills it.

mod common;

use std::time::Duration;

use common::{Operator, Spawn, apply, eventually, manifest};

/// What the test allows for an exit after SIGTERM (the operator's own deadline is 5 s).
const LIMIT: Duration = Duration::from_secs(10);

fn stop(operator: &mut Operator, moment: &str) {
    stop_as(operator, moment, false)
}

/// `early`: the signal may come before the process installed its handler (the default action,
/// death by SIGTERM, is then a clean end too).
fn stop_as(operator: &mut Operator, moment: &str, early: bool) {
    use std::os::unix::process::ExitStatusExt;
    match operator.terminate_within(LIMIT) {
        Ok((status, took)) => {
            eprintln!("SIGTERM while {moment}: {status} after {took:.1?}");
            assert!(
                status.success() || (early && status.signal() == Some(15)),
                "SIGTERM while {moment}: {status}\n{}",
                operator.log_text()
            );
        }
        Err(tail) => panic!("SIGTERM while {moment}: still running after {LIMIT:?}\n{tail}"),
    }
}

/// `count` copies of the vllm-disagg graph, named `g0`, `g1`, ...
async fn graphs(cp: &testkit::ControlPlane, ns: &str, count: usize) {
    let template = manifest("v1beta1/vllm-disagg.yaml");
    for i in 0..count {
        let mut graph = template.clone();
        graph.metadata.name = Some(format!("g{i}"));
        apply(cp.client(), ns, &graph).await;
    }
}

#[tokio::test]
async fn sigterm_at_every_moment_exits_zero_promptly() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let ns = cp.namespace().await;
    // Work for the operator to be busy with.
    graphs(cp, ns.name(), 8).await;

    for delay in [0, 50] {
        let mut operator = Operator::spawn(cp, Spawn::default());
        tokio::time::sleep(Duration::from_millis(delay)).await;
        stop_as(&mut operator, &format!("starting (+{delay} ms)"), true);
    }
    // From its first log line on, the handler is installed.
    let mut operator = Operator::spawn(cp, Spawn::default());
    eventually("a first log line", Duration::from_secs(30), || async {
        !operator.log_text().is_empty()
    })
    .await;
    stop(&mut operator, "starting (first log line)");

    for (moment, line) in [
        ("waiting for leadership", "waiting for leadership"),
        ("leading", "leading"),
        ("caches synced", "caches synced"),
    ] {
        let mut operator = Operator::spawn(cp, Spawn::default());
        eventually(moment, Duration::from_secs(60), || async {
            operator.logged(line)
        })
        .await;
        stop(&mut operator, moment);
    }

    // Converging: new graphs arrive while it runs.
    let mut operator = Operator::spawn(cp, Spawn::default());
    eventually("caches synced", Duration::from_secs(60), || async {
        operator.logged("caches synced")
    })
    .await;
    graphs(cp, ns.name(), 12).await;
    stop(&mut operator, "converging");

    // A standby, while another replica holds the Lease.
    let lease = Some("shared-lease".to_string());
    let mut leader = Operator::spawn(
        cp,
        Spawn {
            lease: lease.clone(),
            ..Spawn::default()
        },
    );
    eventually("a leader", Duration::from_secs(60), || async {
        leader.logged("leading")
    })
    .await;
    let mut standby = Operator::spawn(
        cp,
        Spawn {
            identity: "standby",
            lease,
            ..Spawn::default()
        },
    );
    eventually("the standby waiting", Duration::from_secs(60), || async {
        standby.logged("waiting for leadership")
    })
    .await;
    stop(&mut standby, "standing by");
    stop(&mut leader, "leading with a standby");
}

/// A TCP forwarder in front of the apiserver that can turn into a black hole: connections are
/// then accepted (and the open ones kept) but nothing is forwarded either way, as with a
/// partitioned network.
struct Proxy {
    address: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = cut.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let flag = flag.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    tokio::select! {
                        _ = pump(&mut cr, &mut sw, &flag) => {}
                        _ = pump(&mut sr, &mut cw, &flag) => {}
                    }
                });
            }
        });
        Proxy { address, cut }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either ends; once `cut`, swallows what comes and waits forever.
async fn pump(
    from: &mut tokio::net::tcp::ReadHalf<'_>,
    to: &mut tokio::net::tcp::WriteHalf<'_>,
    cut: &std::sync::atomic::AtomicBool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_an_unreachable_apiserver_exits_zero_promptly() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let upstream = cp.server().trim_start_matches("https://").to_string();

    for leader_elect in [true, false] {
        // The operator reaches the apiserver through the proxy, which goes silent once the
        // operator runs.
        let proxy = Proxy::start(upstream.clone()).await;
        let kubeconfig = cp.write_kubeconfig("partitioned", &["system:masters"]);
        let text = std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .replace(cp.server(), &format!("https://{}", proxy.address));
        let path = cp
            .dir()
            .join(format!("partitioned-{leader_elect}.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        let mut operator = Operator::spawn(
            cp,
            Spawn {
                kubeconfig: Some(path),
                extra_args: vec![format!("--leader-elect={leader_elect}")],
                ..Spawn::default()
            },
        );
        eventually("caches synced", Duration::from_secs(60), || async {
            operator.logged("caches synced")
        })
        .await;
        proxy.cut();
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop(
            &mut operator,
            &format!("the apiserver does not answer (leader election {leader_elect})"),
        );
    }
}
