//! The create, get and list-1k scenarios (issue 2, embedded store): closed-loop ConfigMap CRUD.

use crate::harness::{Api, Error, MakeRequest, Row, closed_loop, configmap, send};
use crate::watch::NS_WATCH;
use hyper::{Method, StatusCode, Uri};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;

/// Namespace of the create scenario.
pub(crate) const NS_CREATE: &str = "bench-create";
/// Namespace holding exactly [`LIST_SIZE`] ConfigMaps (get and list scenarios).
const NS_LIST: &str = "bench-list";
const LIST_SIZE: usize = 1000;

pub(crate) const LIST_CLIENTS: usize = 8;

const TARGET_CREATES_PER_SEC: f64 = 10_000.0;

/// Sets up the namespaces (create, get, list-1k and watch) and the
/// [`LIST_SIZE`] ConfigMaps of [`NS_LIST`].
pub(crate) async fn setup(api: &Api) -> Result<(), Error> {
    api.create_namespaces(&[NS_CREATE, NS_LIST, NS_WATCH])
        .await?;
    let uri: Uri = format!("/api/v1/namespaces/{NS_LIST}/configmaps").parse()?;
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (api, uri) = (Api::new(api.addr), uri.clone());
            tokio::spawn(async move {
                let mut conn = api.connect().await?;
                for i in (t..LIST_SIZE).step_by(16) {
                    let body = configmap(&format!("l-{i}"), i as u64);
                    let req =
                        api.request(Method::POST, uri.clone(), Some(("application/json", body)));
                    let (status, body) = send(&mut conn, req).await?;
                    if status != StatusCode::CREATED {
                        return Err::<(), Error>(
                            format!("setup create: {status} {}", String::from_utf8_lossy(&body))
                                .into(),
                        );
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in tasks {
        timeout(Duration::from_secs(60), t).await???;
    }
    Ok(())
}

/// POST of new ConfigMaps (about 200 bytes each).
/// `round` keeps the names of repeated runs apart.
pub(crate) async fn create(
    api: &Api,
    clients: usize,
    window: Duration,
    round: usize,
) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        api.request(
            Method::POST,
            uri.clone(),
            Some((
                "application/json",
                configmap(&format!("c-{round}-{w}-{i}"), i),
            )),
        )
    });
    let mut row = closed_loop(
        api,
        "create ConfigMap (POST)",
        clients,
        window,
        StatusCode::CREATED,
        make,
    )
    .await?;
    row.note = "~200 B objects".into();
    Ok(row)
}

/// GET of single ConfigMaps, spread over the 1000 of the list namespace.
pub(crate) async fn get(api: &Api, clients: usize, window: Duration) -> Result<Row, Error> {
    let uris: Arc<Vec<Uri>> = Arc::new(
        (0..LIST_SIZE)
            .map(|i| format!("/api/v1/namespaces/{NS_LIST}/configmaps/l-{i}").parse())
            .collect::<Result<_, _>>()?,
    );
    let make: MakeRequest = Arc::new(move |api, w, i| {
        let uri = uris[(w * 7919 + i as usize * 31) % uris.len()].clone();
        api.request(Method::GET, uri, None)
    });
    closed_loop(api, "get ConfigMap", clients, window, StatusCode::OK, make).await
}

/// Unpaginated list of a namespace holding 1000 ConfigMaps.
pub(crate) async fn list_1k(api: &Api, clients: usize, window: Duration) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_LIST}/configmaps").parse()?;
    // Check once that a list holds all the objects.
    let (status, body) = send(
        &mut api.connect().await?,
        api.request(Method::GET, uri.clone(), None),
    )
    .await?;
    #[derive(Deserialize)]
    struct List {
        items: Vec<serde::de::IgnoredAny>,
    }
    let items = serde_json::from_slice::<List>(&body)
        .map(|l| l.items.len())
        .unwrap_or(0);
    if status != StatusCode::OK || items != LIST_SIZE {
        return Err(
            format!("list returned {status} with {items} items, expected {LIST_SIZE}").into(),
        );
    }
    let make: MakeRequest = Arc::new(move |api, _, _| api.request(Method::GET, uri.clone(), None));
    let mut row = closed_loop(
        api,
        "list 1k ConfigMaps",
        clients,
        window,
        StatusCode::OK,
        make,
    )
    .await?;
    row.note = format!("{} KiB per list", body.len() / 1024);
    Ok(row)
}

/// Issue 2: the creates/s target.
pub(crate) fn print_targets(rows: &[Row]) {
    if let Some(r) = rows.iter().find(|r| r.scenario.starts_with("create")) {
        let rate = r.rate();
        let verdict = if rate >= TARGET_CREATES_PER_SEC {
            "met"
        } else {
            "MISSED"
        };
        println!(
            "target creates/s >= {:.0}: {verdict} ({rate:.0}/s, {:+.0}%)",
            TARGET_CREATES_PER_SEC,
            (rate / TARGET_CREATES_PER_SEC - 1.0) * 100.0
        );
    }
}
