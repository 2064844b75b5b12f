//! Issue 16: a thousand CRDs of a Crossplane provider's size
//! (`scripts/gen-crds.py`: 40-50 KB schemas, two served versions) on one
//! fresh server: memory per CRD, how soon each is served after its create
//! returns, discovery and OpenAPI latency, and a custom resource's create
//! and get against a second server with one CRD alone (both started at
//! the beginning, the two measured in interleaved rounds so the machine's
//! noise falls on both alike); then deleting them all. Prints its own
//! table of targets (run alone for clean RSS: `cargo bench ... --
//! crossplane`; the RSS is this process's, client included, but the client
//! keeps only names and file offsets of the generated CRDs).

use crate::harness::{Api, Error, met, send, start_server};
use hyper::{Method, StatusCode};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

const CRDS: usize = 1000;
const SUFFIX: &str = "crossplane.example.com";
const CRD_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// Custom resources created per CRD for the "with objects" memory row.
const OBJECTS_PER_CRD: usize = 3;
/// Timed creates and gets of one custom resource kind, per round.
const CR_OPS: usize = 100;
/// Interleaved rounds of `CR_OPS` on each server (one CRD, all CRDs).
const CR_ROUNDS: usize = 6;

const TARGET_MB_PER_CRD: f64 = 1.0;
const TARGET_SERVED: Duration = Duration::from_secs(1);
const TARGET_ALL: Duration = Duration::from_secs(60);
const TARGET_DISCOVERY: Duration = Duration::from_millis(100);
const TARGET_OPENAPI_V3: Duration = Duration::from_millis(50);
const TARGET_CR_RATIO: f64 = 1.2;
const TARGET_RSS_AFTER_DELETE: f64 = 1.2;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

async fn get(api: &Api, path: &str, accept: Option<&str>) -> Result<(StatusCode, usize), Error> {
    let mut req = api.request(Method::GET, path.parse()?, None);
    if let Some(a) = accept {
        req.headers_mut().insert(hyper::header::ACCEPT, a.parse()?);
    }
    let (status, body) = send(&mut api.connect().await?, req).await?;
    Ok((status, body.len()))
}

/// The median of `n` timed GETs of `path`.
async fn median_get(
    api: &Api,
    path: &str,
    accept: Option<&str>,
    n: usize,
) -> Result<Duration, Error> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (status, _) = get(api, path, accept).await?;
        if status != StatusCode::OK {
            return Err(format!("GET {path}: {status}").into());
        }
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[n / 2])
}

/// Times creating then getting `CR_OPS` objects of CRD 0's kind; appends
/// each latency to `creates` and `gets`.
async fn cr_latency(
    api: &Api,
    round: &str,
    creates: &mut Vec<Duration>,
    gets: &mut Vec<Duration>,
) -> Result<(), Error> {
    let (group, plural, kind) = (format!("g0.{SUFFIX}"), "resource0s", "Resource0");
    let base = format!("/apis/{group}/v1beta1/{plural}");
    let mut conn = api.connect().await?;
    for i in 0..CR_OPS {
        let name = format!("{round}-{i}");
        let body = serde_json::json!({
            "apiVersion": format!("{group}/v1beta1"), "kind": kind,
            "metadata": {"name": name},
            "spec": {"forProvider": {"field0x2": "value"}},
        });
        let req = api.request(
            Method::POST,
            base.parse()?,
            Some(("application/json", body.to_string().into())),
        );
        let t = Instant::now();
        let (status, body) = send(&mut conn, req).await?;
        creates.push(t.elapsed());
        if status != StatusCode::CREATED {
            return Err(
                format!("create {name}: {status} {}", String::from_utf8_lossy(&body)).into(),
            );
        }
        let req = api.request(Method::GET, format!("{base}/{name}").parse()?, None);
        let t = Instant::now();
        let (status, _) = send(&mut conn, req).await?;
        gets.push(t.elapsed());
        if status != StatusCode::OK {
            return Err(format!("get {name}: {status}").into());
        }
    }
    Ok(())
}

fn p50(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Creates `crd` through `api` and waits until its resource is served;
/// returns how long that took after the create returned.
async fn install(api: &Api, doc: String, crd: &Crd) -> Result<Duration, Error> {
    api.create(CRD_PATH, doc).await?;
    let created = Instant::now();
    let list = format!("/apis/{}/v1beta1/{}", crd.group, crd.plural);
    loop {
        if get(api, &list, None).await?.0 == StatusCode::OK {
            return Ok(created.elapsed());
        }
        if created.elapsed() > Duration::from_secs(30) {
            return Err(format!("{list} not served 30 s after its CRD").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One generated CRD: what the bench needs of it in memory, and where its
/// document is in the generated file (read again for its create, so the
/// client holds a few bytes per CRD and the RSS is the server's).
struct Crd {
    name: String,
    group: String,
    plural: String,
    kind: String,
    doc: std::ops::Range<usize>,
}

fn generate(dir: &Path) -> Result<(std::fs::File, Vec<Crd>, usize), Error> {
    let file = dir.join("crds.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gen-crds.py");
    let status = std::process::Command::new("python3")
        .arg(script)
        .arg(CRDS.to_string())
        .arg(&file)
        .arg(SUFFIX)
        .status()?;
    if !status.success() {
        return Err("gen-crds.py failed".into());
    }
    let text = std::fs::read_to_string(&file)?;
    let (mut crds, mut start, mut schema_kb) = (Vec::new(), 0, 0);
    for d in text.split("---\n") {
        let v: serde_json::Value = serde_json::from_str(d)?;
        if crds.is_empty() {
            schema_kb = serde_json::to_vec(&v["spec"]["versions"][0]["schema"])?.len() / 1024;
        }
        let s = |p: &str| {
            v.pointer(p)
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string()
        };
        crds.push(Crd {
            name: s("/metadata/name"),
            group: s("/spec/group"),
            plural: s("/spec/names/plural"),
            kind: s("/spec/names/kind"),
            doc: start..start + d.len(),
        });
        start += d.len() + "---\n".len();
    }
    Ok((std::fs::File::open(&file)?, crds, schema_kb))
}

fn read_doc(file: &std::fs::File, crd: &Crd) -> Result<String, Error> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; crd.doc.len()];
    file.read_exact_at(&mut buf, crd.doc.start as u64)?;
    Ok(String::from_utf8(buf)?)
}

pub(crate) async fn crossplane(srv: &Handle, dir: &Path) -> Result<(), Error> {
    let (file, crds, schema_kb) = generate(dir)?;
    let store = dir.join("crossplane.redb");
    let addr = srv
        .spawn(async move { start_server(&store).await.map_err(|e| e.to_string()) })
        .await??;
    let api = Api::new(addr);
    // The baseline: a server of its own with CRD 0 alone.
    let store = dir.join("crossplane-one.redb");
    let one_addr = srv
        .spawn(async move { start_server(&store).await.map_err(|e| e.to_string()) })
        .await??;
    let one_api = Api::new(one_addr);
    install(&one_api, read_doc(&file, &crds[0])?, &crds[0]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_mib();

    let mut served_after = Vec::with_capacity(CRDS);
    let started = Instant::now();
    for crd in &crds {
        served_after.push(install(&api, read_doc(&file, crd)?, crd).await?);
    }
    let all = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with_crds = rss_mib();
    served_after.sort();
    let served_max = *served_after.last().unwrap_or(&Duration::ZERO);

    let discovery = median_get(&api, "/apis", None, 11).await?;
    let aggregated = median_get(
        &api,
        "/apis",
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
        11,
    )
    .await?;
    let group_v3 = format!("/openapi/v3/apis/g7.{SUFFIX}/v1beta1");
    let t = Instant::now();
    get(&api, &group_v3, None).await?;
    let v3_first = t.elapsed();
    let v3 = median_get(&api, &group_v3, None, 11).await?;
    let t = Instant::now();
    let (_, v2_bytes) = get(&api, "/openapi/v2", None).await?;
    let v2_first = t.elapsed();
    let v2 = median_get(&api, "/openapi/v2", None, 5).await?;
    let (mut one, mut many) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for r in 0..CR_ROUNDS {
        // Alternate which server goes first.
        for k in [r % 2, 1 - r % 2] {
            if k == 0 {
                cr_latency(&one_api, &format!("one{r}"), &mut one.0, &mut one.1).await?;
            } else {
                cr_latency(&api, &format!("all{r}"), &mut many.0, &mut many.1).await?;
            }
        }
    }
    let (one_create, one_get) = (p50(one.0), p50(one.1));
    let (all_create, all_get) = (p50(many.0), p50(many.1));

    // A few objects in every CRD.
    let mut conn = api.connect().await?;
    for crd in &crds {
        let (group, plural, kind) = (&crd.group, &crd.plural, &crd.kind);
        for j in 0..OBJECTS_PER_CRD {
            let body = serde_json::json!({
                "apiVersion": format!("{group}/v1beta1"), "kind": kind,
                "metadata": {"name": format!("o{j}")}, "spec": {"forProvider": {}},
            });
            let req = api.request(
                Method::POST,
                format!("/apis/{group}/v1beta1/{plural}").parse()?,
                Some(("application/json", body.to_string().into())),
            );
            let (status, body) = send(&mut conn, req).await?;
            if status != StatusCode::CREATED {
                return Err(format!("{kind}: {status} {}", String::from_utf8_lossy(&body)).into());
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with_objects = rss_mib();

    for crd in &crds {
        let name = &crd.name;
        let req = api.request(Method::DELETE, format!("{CRD_PATH}/{name}").parse()?, None);
        let (status, _) = send(&mut conn, req).await?;
        if !status.is_success() {
            return Err(format!("delete {name}: {status}").into());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let req = api.request(Method::GET, CRD_PATH.parse()?, None);
        let (_, body) = send(&mut conn, req).await?;
        let left: serde_json::Value = serde_json::from_slice(&body)?;
        if left["items"].as_array().is_some_and(|i| i.is_empty()) {
            break;
        }
        if Instant::now() > deadline {
            return Err("CRDs still there 120 s after their deletes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_delete = rss_mib();

    let per_crd = (with_crds - idle) / CRDS as f64;
    let per_crd_objects = (with_objects - idle) / CRDS as f64;
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!(
        "\ncrossplane scale: {CRDS} CRDs, {schema_kb} KB schema per version, 2 served versions; \
         one fresh in-process server (and one with a single CRD for the custom resource \
         rows, interleaved); RSS of this process (client and that second server included)"
    );
    println!("| measure | value | target | |");
    println!("|---|---|---|---|");
    let row =
        |m: &str, v: String, t: String, ok: bool| println!("| {m} | {v} | {t} | {} |", met(ok));
    row(
        "RSS per CRD above idle",
        format!("{per_crd:.2} MiB ({idle:.0} → {with_crds:.0} MiB)"),
        format!("≤ {TARGET_MB_PER_CRD} MiB"),
        per_crd <= TARGET_MB_PER_CRD,
    );
    row(
        &format!("RSS per CRD with {OBJECTS_PER_CRD} objects each"),
        format!("{per_crd_objects:.2} MiB ({with_objects:.0} MiB)"),
        format!("≤ {TARGET_MB_PER_CRD} MiB"),
        per_crd_objects <= TARGET_MB_PER_CRD,
    );
    row(
        "served after its create returns (max; p50)",
        format!("{} ; {}", ms(served_max), ms(served_after[CRDS / 2])),
        format!("≤ {}", ms(TARGET_SERVED)),
        served_max <= TARGET_SERVED,
    );
    row(
        "all CRDs created and served",
        format!("{:.1} s", all.as_secs_f64()),
        format!("≤ {} s", TARGET_ALL.as_secs()),
        all <= TARGET_ALL,
    );
    row(
        "GET /apis (legacy; aggregated)",
        format!("{} ; {}", ms(discovery), ms(aggregated)),
        format!("≤ {}", ms(TARGET_DISCOVERY)),
        discovery.max(aggregated) <= TARGET_DISCOVERY,
    );
    row(
        "one group's /openapi/v3 (first; cached)",
        format!("{} ; {}", ms(v3_first), ms(v3)),
        format!("≤ {}", ms(TARGET_OPENAPI_V3)),
        v3_first.max(v3) <= TARGET_OPENAPI_V3,
    );
    row(
        "/openapi/v2 (first; cached)",
        format!(
            "{} ; {} ({:.1} MB)",
            ms(v2_first),
            ms(v2),
            v2_bytes as f64 / 1e6
        ),
        "not rebuilt per request".into(),
        v2 * 2 < v2_first,
    );
    let create_ratio = all_create.as_secs_f64() / one_create.as_secs_f64();
    let get_ratio = all_get.as_secs_f64() / one_get.as_secs_f64();
    row(
        "custom resource create p50, 1000 vs 1 CRD",
        format!(
            "{} vs {} ({create_ratio:.2}x)",
            ms(all_create),
            ms(one_create)
        ),
        format!("≤ {TARGET_CR_RATIO}x"),
        create_ratio <= TARGET_CR_RATIO,
    );
    row(
        "custom resource get p50, 1000 vs 1 CRD",
        format!("{} vs {} ({get_ratio:.2}x)", ms(all_get), ms(one_get)),
        format!("≤ {TARGET_CR_RATIO}x"),
        get_ratio <= TARGET_CR_RATIO,
    );
    row(
        "RSS after deleting every CRD",
        format!("{after_delete:.0} MiB ({:.2}x idle)", after_delete / idle),
        format!("≤ {TARGET_RSS_AFTER_DELETE}x idle"),
        after_delete <= idle * TARGET_RSS_AFTER_DELETE,
    );
    Ok(())
}
