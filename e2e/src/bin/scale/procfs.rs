//! `/proc` readings: memory and CPU of a process, the CPU of this program and the
//! control plane, and the machine the report describes.

use std::collections::BTreeMap;

use crate::env_path;

/// `/proc` readings of one process.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProcSample {
    pub(crate) rss_kib: u64,
    /// The heap and stacks (RssAnon) and the mapped files, the binary's own pages
    /// above all (RssFile): what the allocator holds against what the code takes.
    pub(crate) rss_anon_kib: u64,
    pub(crate) rss_file_kib: u64,
    pub(crate) hwm_kib: u64,
    pub(crate) cpu_secs: f64,
}

pub(crate) fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

pub(crate) fn read_proc(pid: u32, tck: f64) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(ProcSample {
        rss_kib: field("VmRSS:")?,
        rss_anon_kib: field("RssAnon:").unwrap_or_default(),
        rss_file_kib: field("RssFile:").unwrap_or_default(),
        hwm_kib: field("VmHWM:")?,
        cpu_secs: (utime + stime) / tck,
    })
}

/// CPU time of the processes around the operator: this program (observer, drivers,
/// baseline) and, when `CONTROL_PLANE_DIR` is set, kube-apiserver and etcd.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuProbes {
    procs: Vec<(String, u32)>,
    tck: f64,
}

impl CpuProbes {
    pub(crate) fn new() -> Self {
        let mut procs = vec![("scale".to_string(), std::process::id())];
        if let Some(dir) = env_path("CONTROL_PLANE_DIR") {
            for name in ["kube-apiserver", "etcd"] {
                if let Some(pid) = std::fs::read_to_string(dir.join(format!("{name}.pid")))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    procs.push((name.to_string(), pid));
                }
            }
        }
        CpuProbes {
            procs,
            tck: clk_tck(),
        }
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<String, f64> {
        self.procs
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), read_proc(*pid, self.tck)?.cpu_secs)))
            .collect()
    }

    pub(crate) fn since(&self, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
        self.snapshot()
            .into_iter()
            .map(|(k, v)| {
                let b = before.get(&k).copied().unwrap_or(v);
                (k, v - b)
            })
            .collect()
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Machine {
    pub(crate) nproc: usize,
    pub(crate) cpu_model: String,
    pub(crate) mem_gib: f64,
    pub(crate) load_start: String,
    pub(crate) load_end: String,
    pub(crate) apiserver_version: String,
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        mem_gib: mem_kib / 1024.0 / 1024.0,
        load_start: loadavg(),
        ..Machine::default()
    }
}
