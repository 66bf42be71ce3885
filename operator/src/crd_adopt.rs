//! `taint-operator adopt-crd`: hands the TaintPolicy CRD to a Helm release.
//!
//! Chart 0.1.0 shipped the CRD in `crds/`, which Helm creates without marking it as
//! the release's. A later chart renders the CRD as a template, and Helm refuses to
//! upgrade a release into an object it does not own ("invalid ownership metadata")
//! before any hook can run. So the chart, when it finds the CRD unowned, leaves it
//! out of that upgrade and runs this command in a pre-upgrade hook instead: it
//! writes the binary's own CRD schema (so the new pods start on it) and Helm's
//! ownership label and annotations, and the next upgrade takes the CRD into the
//! release. A CRD that another release owns is never taken.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, CustomResourceExt,
    api::{PostParams, ResourceExt},
};
use taint_operator_crd::TaintPolicy;
use thiserror::Error;

pub const RELEASE_NAME: &str = "meta.helm.sh/release-name";
pub const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const RESOURCE_POLICY: &str = "helm.sh/resource-policy";
const FIELD_MANAGER: &str = "taint-operator-adopt-crd";
/// Replaces that lose a race with another writer are tried again this often.
const ATTEMPTS: usize = 5;

/// The release the CRD is handed to.
#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    /// Keep the CRD on `helm uninstall` (annotation helm.sh/resource-policy: keep).
    pub keep: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Adopted {
    /// The CRD was not there (deleted since the chart looked): created, owned.
    Created,
    /// The CRD was unowned: its schema is now this binary's, and it is the release's.
    Adopted,
    /// It was the release's already; its schema is now this binary's.
    AlreadyOwned,
}

#[derive(Debug, Error)]
pub enum AdoptError {
    #[error(
        "CustomResourceDefinition {crd} belongs to Helm release {owner:?} in namespace {owner_namespace:?}, not to {release:?} in {namespace:?}: \
         install this release with --set crds.install=false, or hand the CRD over with \
         `kubectl annotate crd {crd} --overwrite {RELEASE_NAME}={release} {RELEASE_NAMESPACE}={namespace}`"
    )]
    OwnedByAnotherRelease {
        crd: String,
        owner: String,
        owner_namespace: String,
        release: String,
        namespace: String,
    },
    #[error("no cluster to talk to (in-cluster service account or KUBECONFIG): {0}")]
    NoCluster(#[source] kube::Error),
    #[error("{action} CustomResourceDefinition {crd}: {source}")]
    Api {
        action: &'static str,
        crd: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "CustomResourceDefinition {crd} changed under every one of {ATTEMPTS} replaces; run the upgrade again"
    )]
    KeptChanging { crd: String },
}

/// The CRD as this binary defines it, with the release's ownership metadata.
fn owned(mut crd: CustomResourceDefinition, release: &Release) -> CustomResourceDefinition {
    crd.labels_mut().insert(MANAGED_BY.into(), "Helm".into());
    let annotations = crd.annotations_mut();
    annotations.insert(RELEASE_NAME.into(), release.name.clone());
    annotations.insert(RELEASE_NAMESPACE.into(), release.namespace.clone());
    if release.keep {
        annotations.insert(RESOURCE_POLICY.into(), "keep".into());
    } else {
        annotations.remove(RESOURCE_POLICY);
    }
    crd
}

/// Checks who owns `live`: `Ok(true)` when `release` does, `Ok(false)` when nobody.
fn owned_by(live: &CustomResourceDefinition, release: &Release) -> Result<bool, AdoptError> {
    let annotations = live.annotations();
    let owner = annotations.get(RELEASE_NAME);
    let owner_namespace = annotations.get(RELEASE_NAMESPACE);
    match (owner, owner_namespace) {
        (None, None) => Ok(false),
        (Some(o), Some(ns)) if *o == release.name && *ns == release.namespace => Ok(true),
        _ => Err(AdoptError::OwnedByAnotherRelease {
            crd: live.name_any(),
            owner: owner.cloned().unwrap_or_default(),
            owner_namespace: owner_namespace.cloned().unwrap_or_default(),
            release: release.name.clone(),
            namespace: release.namespace.clone(),
        }),
    }
}

/// Writes this binary's CRD and the release's ownership onto the cluster's CRD.
/// The object is replaced, not recreated: deleting a CRD deletes every policy.
pub async fn adopt(client: &Client, release: &Release) -> Result<Adopted, AdoptError> {
    let want = TaintPolicy::crd();
    let name = want.name_any();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let api_error = |action, source| AdoptError::Api {
        action,
        crd: name.clone(),
        source,
    };
    for _ in 0..ATTEMPTS {
        let Some(live) = api.get_opt(&name).await.map_err(|e| api_error("get", e))? else {
            match api.create(&params, &owned(want.clone(), release)).await {
                Ok(_) => return Ok(Adopted::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(api_error("create", e)),
            }
        };
        let was_owned = owned_by(&live, release)?;
        let mut next = live;
        next.spec = want.spec.clone();
        let next = owned(next, release);
        match api.replace(&name, &params, &next).await {
            Ok(_) if was_owned => return Ok(Adopted::AlreadyOwned),
            Ok(_) => return Ok(Adopted::Adopted),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api_error("replace", e)),
        }
    }
    Err(AdoptError::KeptChanging { crd: name })
}

/// The command: connects, adopts, and says what it did.
pub async fn run(release: &Release) -> Result<String, AdoptError> {
    let client = Client::try_default().await.map_err(AdoptError::NoCluster)?;
    let adopted = adopt(&client, release).await?;
    Ok(describe(&adopted, release) + "\n")
}

/// What the command prints on success.
pub fn describe(adopted: &Adopted, release: &Release) -> String {
    let crd = TaintPolicy::crd_name();
    let whose = format!(
        "Helm release {:?} in namespace {:?}",
        release.name, release.namespace
    );
    match adopted {
        Adopted::Created => format!("created CustomResourceDefinition {crd} for {whose}"),
        Adopted::Adopted => format!(
            "CustomResourceDefinition {crd} updated to this version's schema and handed to {whose}; the next `helm upgrade` manages it"
        ),
        Adopted::AlreadyOwned => {
            format!(
                "CustomResourceDefinition {crd} (already {whose}'s) updated to this version's schema"
            )
        }
    }
}
