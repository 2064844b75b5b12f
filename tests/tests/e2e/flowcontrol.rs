//! API Priority and Fairness against the real binary: upstream's bootstrap
//! FlowSchemas and PriorityLevelConfigurations are served; a custom
//! FlowSchema puts a flooding user in a small level whose full queue
//! answers `429` with `Retry-After` and upstream's `Status`, while another
//! user's reads and Lease renewals keep succeeding; the admin
//! (`system:masters`) is exempt; `/metrics` counts both.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasm_apiserver_e2e::{
    Server, https_request, kubectl_json, kubectl_ok, poll_until, write_manifest,
};

#[test]
fn a_flooding_user_is_refused_while_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "flood-token-0123456789,flooder,uid-flooder,\nother-token-0123456789,other,uid-other,\n",
    )
    .unwrap();
    let s = Server::start_with_args(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--max-requests-inflight",
        "2",
        "--max-mutating-requests-inflight",
        "1",
    ]);
    // The bootstrap configuration is there.
    let fs = kubectl_json(&s, None, &["get", "flowschemas"]);
    let names: Vec<&str> = fs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["metadata"]["name"].as_str())
        .collect();
    for want in [
        "exempt",
        "probes",
        "system-leader-election",
        "global-default",
        "catch-all",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    let path = write_manifest(
        &s,
        "apf.yaml",
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tiny}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: flooder}
spec:
  priorityLevelConfiguration: {name: tiny}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: flooder}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: apf-users}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: flooder}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: other}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: other-lease, namespace: default}
spec: {holderIdentity: other, leaseDurationSeconds: 15}
"#,
    );
    kubectl_ok(&s, None, &["apply", "-f", path.to_str().unwrap()]);
    let pki = s.data_dir().join("pki");
    let metric = |name: &str| -> Option<u64> {
        let (_, text) = s.get("/metrics").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    poll_until(Duration::from_secs(30), "the tiny level", || {
        metric("apiserver_flowcontrol_nominal_limit_seats{priority_level=\"tiny\"}")
    });

    // The flood: 24 clients listing as fast as they can.
    let (ok, refused, other_failures) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let retry_after = Arc::new(std::sync::Mutex::new(None::<(String, String)>));
    let url = s.url().to_string();
    let flooders: Vec<_> = (0..24)
        .map(|_| {
            let (pki, url, ok, refused, retry_after) = (
                pki.clone(),
                url.clone(),
                ok.clone(),
                refused.clone(),
                retry_after.clone(),
            );
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let Ok((status, head, body)) = https_request(
                        &pki,
                        &url,
                        "GET",
                        "/api/v1/configmaps",
                        Some("flood-token-0123456789"),
                    ) else {
                        continue;
                    };
                    match status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => {
                            *retry_after.lock().unwrap() = Some((head, body));
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                        other => panic!("flooder got {other}: {body}"),
                    };
                }
            })
        })
        .collect();
    // Meanwhile another user reads and renews a Lease.
    let mut other_ok = 0;
    for i in 0..20 {
        let (status, _, body) = https_request(
            &pki,
            &url,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            Some("other-token-0123456789"),
        )
        .unwrap();
        if status == 200 {
            other_ok += 1;
        } else {
            other_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!("other's read {i}: {status} {body}");
        }
        let (status, _, body) = https_request(
            &pki,
            &url,
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/other-lease",
            Some("other-token-0123456789"),
        )
        .unwrap();
        if status != 200 {
            other_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!("other's lease read {i}: {status} {body}");
        }
    }
    for f in flooders {
        f.join().unwrap();
    }
    assert_eq!(other_failures.load(Ordering::Relaxed), 0);
    assert_eq!(other_ok, 20);
    assert!(ok.load(Ordering::Relaxed) > 0);
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the flood was never refused"
    );
    let (head, body) = retry_after.lock().unwrap().clone().unwrap();
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["code"], 429);
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    let rejected = metric(
        "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"flooder\",priority_level=\"tiny\",reason=\"queue-full\"}",
    )
    .unwrap_or(0);
    assert!(rejected > 0);
    assert!(
        metric("apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"}")
            .unwrap_or(0)
            >= 40
    );
    // The admin is exempt: its requests never wait or fail.
    kubectl_ok(&s, None, &["get", "configmaps", "-A"]);
}
