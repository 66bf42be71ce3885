//! What every timed phase of a run reads, whichever runner it times.

use std::path::Path;

use kube::Client;

use crate::{Args, model::PolicyDef, observer::Observer, procfs::CpuProbes};

pub(crate) struct Bench<'a> {
    pub args: &'a Args,
    /// The admin client: flips conditions, samples nodes, reads the API server's
    /// metrics and field managers.
    pub client: &'a Client,
    /// The kubeconfig the baseline's own clients are made from (`--baseline-as`).
    pub baseline_kubeconfig: &'a Path,
    pub defs: &'a [PolicyDef],
    pub observer: &'a Observer,
    pub probes: &'a CpuProbes,
}
