//! What the operator keeps of the cluster between events: the node cache and its
//! slim nodes, the critical-pod index, the label-selected pod watches that feed it, and
//! the decoding that keeps both small. Nothing here decides or writes.

pub mod initial_list;
pub mod k8s_proto;
pub mod node_cache;
pub mod node_proto;
pub mod node_store;
pub mod pod_cache;
pub mod pod_proto;
pub mod pod_watch;
pub mod proto_watch;
pub mod settled;
pub mod slim;
pub mod watch;
