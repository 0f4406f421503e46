//! Values built from files (TLS configurations), rebuilt when a file changes on disk.
//!
//! Rotation tools such as cert-manager replace certificate files in place (often by swapping a
//! symlink), so kroute checks the files' contents every `reload_ms` and rebuilds the value when
//! any of them changed. A rebuild that fails (e.g. the key was written before the certificate)
//! keeps the previous value and is retried on the next check. Connections take the current value
//! when they start, so a rotation reaches new connections and never drops existing ones.
//!
//! Polling was chosen over inotify: a symlink swap in a mounted Kubernetes secret does not
//! always produce an event for the watched path, and a check every few seconds costs nothing.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tracing::{info, warn};

use super::metrics::SecurityMetrics;

/// A value built from files, swapped whole when they change.
pub struct Reloading<T> {
    current: RwLock<Arc<T>>,
}

impl<T> Reloading<T> {
    /// The value new connections use now.
    pub fn get(&self) -> Arc<T> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, value: T) {
        let value = Arc::new(value);
        match self.current.write() {
            Ok(mut guard) => *guard = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
    }
}

/// Builds the value once (an error here stops kroute at start), then, if `every` is not zero,
/// rebuilds it in the background whenever the contents of `files` change. `name` says what it is
/// in logs and in `kroute_tls_reloads_total{what=..}`. Must be called inside a tokio runtime
/// when `every` is not zero.
pub fn watch<T, F>(
    name: &'static str,
    files: Vec<PathBuf>,
    every: Duration,
    metrics: Arc<SecurityMetrics>,
    build: F,
) -> Result<Arc<Reloading<T>>, String>
where
    T: Send + Sync + 'static,
    F: Fn() -> Result<T, String> + Send + Sync + 'static,
{
    let mut seen = contents(&files);
    let reloading = Arc::new(Reloading {
        current: RwLock::new(Arc::new(build()?)),
    });
    if every.is_zero() {
        return Ok(reloading);
    }
    let target = reloading.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = contents(&files);
            if now == seen {
                continue;
            }
            match build() {
                Ok(value) => {
                    target.set(value);
                    seen = now;
                    metrics.reloaded(name);
                    info!(what = name, "reloaded changed certificate files");
                }
                Err(e) => {
                    metrics.reload_failed(name);
                    warn!(
                        what = name,
                        "changed certificate files not loaded, keeping the old ones: {e}"
                    );
                    seen = now; // retried when the files change again
                }
            }
        }
    });
    Ok(reloading)
}

/// What the files hold now (None for a file that cannot be read at the moment).
fn contents(files: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    files.iter().map(|f| std::fs::read(f).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_changed_file_rebuilds_and_a_bad_one_keeps_the_old_value() {
        let dir = std::env::temp_dir().join(format!("kroute-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("value");
        std::fs::write(&file, "1").unwrap();
        let builds = Arc::new(AtomicU32::new(0));
        let (path, counter) = (file.clone(), builds.clone());
        let value = watch(
            "test",
            vec![file.clone()],
            Duration::from_secs(1),
            Arc::new(SecurityMetrics::new()),
            move || {
                counter.fetch_add(1, Ordering::Relaxed);
                let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
                text.trim().parse::<u32>().map_err(|e| e.to_string())
            },
        )
        .unwrap();
        assert_eq!(*value.get(), 1);

        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            builds.load(Ordering::Relaxed),
            1,
            "unchanged files are not rebuilt"
        );

        std::fs::write(&file, "2").unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*value.get(), 2);

        std::fs::write(&file, "not a number").unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*value.get(), 2, "a bad file keeps the last good value");
        let _ = std::fs::remove_dir_all(dir);
    }
}
