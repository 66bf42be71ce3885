//! How the node and pod watches list, and the one mapping of their events that
//! the slim decoders need.

use kube::runtime::watcher::{self, Event};

/// Node lists come in small pages: each page is held whole, as text and decoded,
/// while it is read, and a kubelet's Node is about 10 kB of JSON.
pub fn node_list_pages() -> watcher::Config {
    watcher::Config::default().page_size(100)
}

/// Pod lists are label-selected, and an API server that reads them from etcd scans
/// every pod of the namespace for each page: small pages would make the first sync
/// take minutes at 150,000 pods. A pod is about 3 kB of JSON.
pub fn pod_list_pages() -> watcher::Config {
    watcher::Config::default().page_size(500)
}

/// The same watch event holding the full type (the slim wrappers only change decoding).
pub fn slim_event<S, K>(event: Event<S>, unwrap: impl Fn(S) -> K) -> Event<K> {
    match event {
        Event::Apply(o) => Event::Apply(unwrap(o)),
        Event::Delete(o) => Event::Delete(unwrap(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(unwrap(o)),
        Event::InitDone => Event::InitDone,
    }
}
