//! Jobs of this very binary's hidden rank commands (`volley bench`, `volley soak`): launched as
//! `volley run` launches a program, with rank 0's result handed back through a temporary file.

use serde::de::DeserializeOwned;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// How to launch the ranks.
pub struct SelfJob {
    /// Ranks, and ranks per (emulated) node.
    pub ranks: usize,
    pub per_node: usize,
    /// Pin the ranks (`volley run --bind`); label their output lines.
    pub bind: bool,
    pub label: bool,
    /// Variables for the ranks.
    pub env: Vec<(OsString, OsString)>,
    /// What rank 0's result is called in errors ("benchmark", "soak").
    pub what: &'static str,
}

impl SelfJob {
    /// Runs the job; `args` makes the ranks' command line from the file rank 0 writes its
    /// result to. Returns that result. A Ctrl-C or kill of the launcher ends this process as
    /// the launcher would (128 + the signal).
    pub fn run<T: DeserializeOwned>(
        self,
        args: impl FnOnce(&Path) -> Vec<OsString>,
    ) -> Result<T, String> {
        // This very binary, even if the file was replaced or deleted since it started (a
        // rebuild): current_exe() would name a path that is gone.
        let proc_exe = std::path::PathBuf::from("/proc/self/exe");
        let exe = if proc_exe.exists() {
            proc_exe
        } else {
            std::env::current_exe().map_err(|e| format!("locating the volley binary: {e}"))?
        };
        let out = std::env::temp_dir().join(format!(
            "volley-{}-{}-{:x}.json",
            self.what,
            std::process::id(),
            volley::bootstrap::random_u64()
        ));
        let opts = crate::launch::LaunchOptions {
            ranks: self.ranks,
            label: self.label,
            bind: self.bind,
            ranks_per_node: self.per_node,
            env: self.env,
            hang_report_after: None,
            grace: Duration::from_secs(2),
            program: exe.into_os_string(),
            args: args(&out),
        };
        let code = crate::launch::launch(&opts).map_err(|e| e.to_string())?;
        crate::bar::job_done();
        let text = std::fs::read(&out);
        let _ = std::fs::remove_file(&out);
        if let Some(sig) = crate::launch::interrupted_by() {
            // Ctrl-C or a kill: the launcher said so and stopped the ranks; end like it, with
            // 128 + the signal, rather than as a failed job.
            std::process::exit(128 + sig);
        }
        if code != 0 {
            return Err(format!("{} ranks failed (exit code {code})", self.what));
        }
        let text = text.map_err(|e| format!("reading rank 0's results: {e}"))?;
        serde_json::from_slice(&text).map_err(|e| format!("parsing rank 0's results: {e}"))
    }
}
