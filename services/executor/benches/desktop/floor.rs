//! The floor of a listing: what the application spends answering the requests a listing needs, asked
//! by a minimal client on the executor's own connection (no walk, no bookkeeping). GTK answers D-Bus
//! on its main thread one message at a time, so N concurrent calls cost N of its replies; its CPU
//! time per call (from `/proc/PID/task/*/schedstat`) is what no client-side change can remove.

use std::time::{Duration, Instant};

use atspi::CoordType;
use atspi::proxy::cache::CacheProxy;
use atspi::proxy::component::ComponentProxy;
use futures::future::join_all;

/// A benchmark row: name, samples, note.
pub type Row = (String, Vec<Duration>, String);

/// CPU time process `pid` has run so far, all its threads, in nanoseconds.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `op` `runs` times: its wall times, and the application's CPU per run in the note.
async fn timed<F, Fut>(pid: u32, runs: usize, name: String, mut op: F) -> Row
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(runs);
    let cpu = cpu_ns(pid);
    for _ in 0..runs {
        let t = Instant::now();
        op().await;
        samples.push(t.elapsed());
    }
    let per_run = (cpu_ns(pid) - cpu) as f64 / runs as f64 / 1e6;
    (
        name,
        samples,
        format!("application CPU {per_run:.2} ms per run"),
    )
}

/// The minimal requests of a listing, timed one kind at a time: the cache, the extents of every node
/// walked and of the listed ones only, and as many pings (the per-message floor).
pub async fn measure(
    conn: &zbus::Connection,
    pid: u32,
    bus: &str,
    walked: &[String],
    listed: &[String],
    runs: usize,
) -> Vec<Row> {
    let cache = CacheProxy::builder(conn)
        .destination(bus.to_owned())
        .unwrap()
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    let mut rows = Vec::new();
    let items = cache.get_items().await.unwrap().len();
    rows.push(
        timed(pid, runs, "floor: Cache.GetItems".into(), || async {
            cache.get_items().await.unwrap();
        })
        .await,
    );
    rows.last_mut().unwrap().2 += &format!(", {items} items");
    let component = |path: &String| {
        ComponentProxy::builder(conn)
            .destination(bus.to_owned())
            .unwrap()
            .path(path.clone())
            .unwrap()
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
    };
    for (what, paths) in [("walked", walked), ("listed", listed)] {
        let proxies = join_all(paths.iter().map(component)).await;
        let proxies: Vec<_> = proxies.into_iter().map(Result::unwrap).collect();
        let name = format!("floor: {} GetExtents concurrently ({what})", paths.len());
        rows.push(
            timed(pid, runs, name, || async {
                join_all(proxies.iter().map(|p| p.get_extents(CoordType::Screen))).await;
            })
            .await,
        );
    }
    let ping = || {
        conn.call_method(
            Some(bus),
            "/org/a11y/atspi/accessible/root",
            Some("org.freedesktop.DBus.Peer"),
            "Ping",
            &(),
        )
    };
    let name = format!("floor: {} Peer.Ping concurrently", walked.len());
    rows.push(
        timed(pid, runs, name, || async {
            join_all((0..walked.len()).map(|_| ping())).await;
        })
        .await,
    );
    rows
}
