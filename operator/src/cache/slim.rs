//! What the pod watches decode.
//!
//! A Pod carries its whole spec. Decoding that into `Pod` and trimming afterwards
//! allocates all of it for every pod of every list page, and that high-water mark
//! stays in the process. This wrapper reads only the fields the critical-pod check
//! uses and skips the rest while parsing. (Nodes are decoded straight into the node
//! cache's own type, see `node_cache`.)

use std::{borrow::Cow, collections::BTreeMap};

use k8s_openapi::{
    api::core::v1::{Pod, PodCondition, PodSpec, PodStatus},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::{Resource, core::NamespaceResourceScope};
use serde::{Deserialize, Deserializer};
use taint_operator_crd::POD_READY_ANNOTATION;

/// A Pod decoded with only what the critical-pod check reads.
#[derive(Clone, Debug)]
pub struct SlimPod(pub Pod);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl Meta {
    /// Keeps the annotations named in `keep`. The map itself stays even when
    /// emptied: whether it exists decides how the node writer adds an annotation.
    fn into_object_meta(self, keep: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            labels: self.labels,
            annotations: self.annotations.map(|mut a| {
                a.retain(|k, _| keep.contains(&k.as_str()));
                a
            }),
            ..ObjectMeta::default()
        }
    }
}

#[derive(Deserialize)]
struct PodWire {
    metadata: Meta,
    spec: Option<PodSpecWire>,
    status: Option<PodStatusWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecWire {
    node_name: Option<String>,
}

#[derive(Deserialize)]
struct PodStatusWire {
    phase: Option<String>,
    conditions: Option<Vec<PodConditionWire>>,
}

#[derive(Deserialize)]
struct PodConditionWire {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = PodWire::deserialize(d)?;
        let status = wire.status.map(|s| PodStatus {
            phase: s.phase,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
        Ok(SlimPod(Pod {
            metadata: wire.metadata.into_object_meta(&[POD_READY_ANNOTATION]),
            spec: Some(PodSpec {
                node_name: wire.spec.and_then(|s| s.node_name),
                ..PodSpec::default()
            }),
            status,
        }))
    }
}

/// Same API location as `$full`: only the decoding differs.
macro_rules! same_resource_as {
    ($slim:ty, $full:ty, $scope:ty) => {
        impl Resource for $slim {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$full>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$full>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$full>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$full>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

same_resource_as!(SlimPod, Pod, NamespaceResourceScope);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_slim_pod_keeps_what_readiness_reads() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "cni-x", "namespace": "kube-system", "resourceVersion": "7",
                "labels": {"app": "cni"},
                "annotations": {POD_READY_ANNOTATION: "true", "other": "dropped"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False", "reason": "r"}]}
        });
        let slim: SlimPod = serde_json::from_value(pod.clone()).unwrap();
        let full: Pod = serde_json::from_value(pod).unwrap();
        assert_eq!(
            engine::cluster::PodView::from_pod(&slim.0),
            engine::cluster::PodView::from_pod(&full)
        );
        assert_eq!(engine::cluster::bound_node(&slim.0), Some("n1"));
        assert_eq!(
            slim.0
                .metadata
                .annotations
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [POD_READY_ANNOTATION]
        );
        assert!(slim.0.spec.unwrap().containers.is_empty());
    }

    #[test]
    fn slim_pods_live_where_pods_do() {
        assert_eq!(
            SlimPod::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }
}
