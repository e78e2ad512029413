//! Fan-out over hosts: at most `concurrency` at once, results in inventory order.
//!
//! Invariants: every host gets a result, a failure on one host never stops the others, and the
//! result list is in the order the hosts were given (never completion order), so output and
//! error reports are stable.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::inventory::Host;

/// Runs `f` for every `(name, item)` with at most `concurrency` running at once. Each future runs
/// on its own task; a panic becomes that item's error. Results come back in input order.
pub async fn for_each<I, T, F, Fut>(
    items: Vec<(String, I)>,
    concurrency: usize,
    f: F,
) -> Vec<(String, anyhow::Result<T>)>
where
    F: Fn(I) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = JoinSet::new();
    let mut index_of = HashMap::new();
    let mut names = Vec::with_capacity(items.len());
    for (i, (name, item)) in items.into_iter().enumerate() {
        names.push(name);
        let fut = f(item);
        let permits = permits.clone();
        let handle = set.spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = permits.acquire_owned().await;
            fut.await
        });
        index_of.insert(handle.id(), i);
    }
    let mut results: Vec<Option<anyhow::Result<T>>> = names.iter().map(|_| None).collect();
    while let Some(joined) = set.join_next_with_id().await {
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(e) => (e.id(), Err(anyhow::anyhow!("task failed: {e}"))),
        };
        if let Some(&i) = index_of.get(&id) {
            results[i] = Some(result);
        }
    }
    names
        .into_iter()
        .zip(results)
        .map(|(name, r)| (name, r.unwrap_or_else(|| Err(anyhow::anyhow!("task vanished")))))
        .collect()
}

/// Runs `f` for every host (at most `concurrency` at once); results in the order of `hosts`.
/// `f` borrows the host to build a future that owns what it needs.
pub async fn for_each_host<T, F, Fut>(
    hosts: &[&Host],
    concurrency: usize,
    f: F,
) -> Vec<(String, anyhow::Result<T>)>
where
    F: Fn(&Host) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let items = hosts.iter().map(|h| (h.name.clone(), *h)).collect();
    for_each(items, concurrency, f).await
}

/// `host: line` for every line of `text` (each ending in a newline); empty text gives "".
pub fn prefix_lines(host: &str, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + host.len() * 4);
    for line in text.lines() {
        out.push_str(host);
        out.push_str(": ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn every_line_gets_the_host() {
        assert_eq!(prefix_lines("cp1", "a\nb\n"), "cp1: a\ncp1: b\n");
        assert_eq!(prefix_lines("cp1", "a"), "cp1: a\n");
        assert_eq!(prefix_lines("cp1", ""), "");
    }

    #[tokio::test]
    async fn results_keep_input_order_and_every_failure() {
        let items: Vec<(String, u64)> = (0..8).map(|i| (format!("h{i}"), i)).collect();
        let results = for_each(items, 8, |i| async move {
            // Later items finish first.
            tokio::time::sleep(Duration::from_millis(80 - i * 10)).await;
            if i % 3 == 0 {
                anyhow::bail!("h{i} broke")
            }
            if i == 4 {
                panic!("h4 panicked");
            }
            Ok(i * 2)
        })
        .await;
        let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]);
        for (i, (_, r)) in results.iter().enumerate() {
            match (i % 3, i) {
                (0, _) => assert_eq!(r.as_ref().unwrap_err().to_string(), format!("h{i} broke")),
                (_, 4) => assert!(r.as_ref().unwrap_err().to_string().contains("panicked")),
                _ => assert_eq!(*r.as_ref().unwrap(), i as u64 * 2),
            }
        }
    }

    #[tokio::test]
    async fn concurrency_is_bounded() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let items: Vec<(String, ())> = (0..10).map(|i| (format!("h{i}"), ())).collect();
        let results = for_each(items, 3, |()| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .await;
        assert!(results.iter().all(|(_, r)| r.is_ok()));
        assert!(peak.load(Ordering::SeqCst) <= 3);
    }
}
