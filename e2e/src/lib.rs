//! Harness of the taint-operator end-to-end suite (`e2e/tests/e2e/`).
//!
//! [`Harness::setup`] starts ONE bare control plane for the whole test binary with
//! `e2e/control-plane.sh` (or uses `E2E_KUBECONFIG`), installs the CRD with the
//! admin credentials and runs the operator binary as the least-privileged
//! `taint-operator` user, its log in a file. Scenarios then drive Nodes, Pods and
//! TaintPolicies through [`K`] and wait for the operator with [`eventually`].
//!
//! Without `KUBE_APISERVER_BIN`/`ETCD_BIN` and without `E2E_KUBECONFIG` the setup
//! says so in one line ([`SKIP_LINE`]) and the suite passes without doing anything.

pub mod cluster;
pub mod k8s;
pub mod operator;
pub mod proxy;
pub mod wait;

pub use cluster::{Harness, SKIP_LINE, Setup, Started, start_control_plane};
pub use k8s::{Cond, K, PolicyView};
pub use operator::{Metrics, Operator, free_port};
pub use proxy::Proxy;
pub use wait::{always_for, eventually, eventually_within};

/// Errors are messages for a person reading a failed scenario.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T = ()> = std::result::Result<T, Error>;

/// Fails the current check with a formatted message.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(format!($($arg)*).into())
    };
}

/// Fails the current check with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(format!($($arg)*).into());
        }
    };
}

/// Fails unless `left == right`, showing both and what was compared.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)*) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}: got {:?}, want {:?}", format!($($arg)*), l, r).into());
        }
    }};
}
