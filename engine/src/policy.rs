//! A TaintPolicy compiled for evaluation: regexes built, durations parsed,
//! selectors ready. Compilation is where the operator finds what only it can
//! tell (regex syntax), and reports it with the field's path.

use std::time::Duration;

use crate::short_str::same;
use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use regex::Regex;
use taint_operator_crd::{Mode, PolicyTaint, TaintPolicy};

use crate::{
    duration::parse_go_duration,
    eviction_rules::EvictionRules,
    invalid_spec::InvalidSpec,
    ownership::taint_id,
    selector::{Selector, check, selector_string},
};

/// An anchored status or reason pattern: the whole string must match.
///
/// Most patterns are a word or a few alternatives (`True`, `Kaput|Ruined`); those
/// are also kept as words, and matched by comparing strings, which costs a fraction
/// of running the regex: a full evaluation runs tens of thousands of them.
#[derive(Debug, Clone)]
pub struct Pattern {
    regex: Regex,
    /// The alternatives, when every one is a plain word the regex matches only itself.
    words: Option<Vec<String>>,
}

impl Pattern {
    fn new(pattern: &str, field: &str) -> Result<Self, InvalidSpec> {
        // Letters, digits, `_` and `-` mean themselves outside a class; anything else
        // (`.`, `*`, `(`, `\`, ...) is left to the regex.
        let plain = pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|'));
        Ok(Pattern {
            regex: anchored(pattern, field)?,
            words: plain.then(|| pattern.split('|').map(str::to_string).collect()),
        })
    }

    pub fn is_match(&self, s: &str) -> bool {
        match &self.words {
            Some(words) => words.iter().any(|w| same(w, s)),
            None => self.regex.is_match(s),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CompiledCondition {
    pub type_: String,
    pub status_source: String,
    pub status: Pattern,
    pub reason: Option<Pattern>,
    /// The reason pattern and the `for` window as written, for `explain`.
    pub reason_source: Option<String>,
    pub for_source: Option<String>,
    pub for_: Option<Duration>,
    /// `staleAfter`: older than this, the condition counts as `Unknown`.
    pub stale_after: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct CompiledReadinessCondition {
    pub type_: String,
    pub status_source: String,
    pub status: Pattern,
    pub stale_after: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct CompiledCriticalPod {
    pub name: String,
    pub namespace: String,
    pub selector: Selector,
    /// The same selector in label-selector syntax, for a label-selected pod watch.
    pub label_selector: String,
}

#[derive(Debug, Clone)]
pub struct Readiness {
    pub conditions: Vec<CompiledReadinessCondition>,
    pub critical_pods: Vec<CompiledCriticalPod>,
}

/// What evaluation needs of a valid spec.
#[derive(Debug, Clone)]
pub struct Rules {
    pub node_selector: Selector,
    /// OR of AND-groups.
    pub matchers: Vec<Vec<CompiledCondition>>,
    pub readiness: Option<Readiness>,
    pub max_tainted_nodes: Option<IntOrString>,
    /// `spec.eviction`: NoExecute taints go on in steps (see `drain`).
    pub eviction: Option<EvictionRules>,
    /// Some condition has `staleAfter` (the evaluation then looks at heartbeats).
    pub reads_staleness: bool,
    /// `spec.clearAfter`: how long no matcher must have matched before taints held
    /// for matchers come off.
    pub clear_after: Duration,
}

/// `spec.clearAfter` when absent: longer than a detector's restart (node-problem-detector
/// posts its default status at start, then what its first checks find, seconds later)
/// and than one check interval of the plugins it ships (at most a minute), so a
/// restart never lifts a taint it only seems to clear.
pub const DEFAULT_CLEAR_AFTER: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub name: String,
    pub uid: String,
    pub created: Option<Timestamp>,
    pub generation: Option<i64>,
    pub deleting: bool,
    pub mode: Mode,
    pub dry_run: bool,
    /// `spec.suspend`: frozen as a dry run is, reported `Suspended`.
    pub suspended: bool,
    pub taints: Vec<PolicyTaint>,
    /// `<key>:<effect>` of each taint, in the order of `taints`.
    pub ids: Vec<String>,
    pub rules: Result<Rules, InvalidSpec>,
}

impl CompiledPolicy {
    pub fn compile(policy: &TaintPolicy) -> Self {
        let spec = &policy.spec;
        CompiledPolicy {
            name: policy.metadata.name.clone().unwrap_or_default(),
            uid: policy.metadata.uid.clone().unwrap_or_default(),
            created: policy.metadata.creation_timestamp.as_ref().map(|t| t.0),
            generation: policy.metadata.generation,
            deleting: policy.metadata.deletion_timestamp.is_some(),
            mode: spec.mode,
            dry_run: spec.dry_run,
            suspended: spec.suspend,
            taints: spec.taints.clone(),
            ids: spec
                .taints
                .iter()
                .map(|t| taint_id(&t.key, t.effect.as_str()))
                .collect(),
            rules: compile_rules(policy),
        }
    }

    /// The policy may change nodes: valid, not a dry run, not suspended, not being deleted.
    pub fn is_active(&self) -> bool {
        self.rules.is_ok() && !self.dry_run && !self.suspended && !self.deleting
    }

    pub fn taint_ids(&self) -> impl Iterator<Item = String> + '_ {
        self.ids.iter().cloned()
    }

    /// The cap on matcher-triggered taints for `selected` nodes; percentages round down.
    pub fn tainted_limit(&self, selected: usize) -> Option<usize> {
        match self.rules.as_ref().ok()?.max_tainted_nodes.as_ref()? {
            IntOrString::Int(n) => Some((*n).max(0) as usize),
            IntOrString::String(s) => match s.strip_suffix('%') {
                Some(percent) => {
                    let percent: usize = percent.parse().ok()?;
                    Some(selected * percent.min(100) / 100)
                }
                // The schema also accepts a plain number as a string ("5"): a count, not 5%.
                None => s.parse().ok(),
            },
        }
    }
}

fn anchored(pattern: &str, field: &str) -> Result<Regex, InvalidSpec> {
    // The whole string must match, as the API promises; a bare `True` must not match `NotTrue`.
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| InvalidSpec {
        field: field.to_string(),
        message: format!("invalid regex {pattern:?}: {}", last_line(&e.to_string())),
    })
}

/// The regex crate's message ends with the line that says what is wrong.
fn last_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_string()
}

/// `staleAfter` of the condition at `field`.
fn stale_after(source: Option<&str>, field: &str) -> Result<Option<Duration>, InvalidSpec> {
    source
        .map(|d| {
            parse_go_duration(d).ok_or_else(|| InvalidSpec {
                field: format!("{field}.staleAfter"),
                message: format!(
                    "invalid duration {d:?}: use a Go duration such as 2m or 90s, at most 2562047h"
                ),
            })
        })
        .transpose()
}

fn compile_rules(policy: &TaintPolicy) -> Result<Rules, InvalidSpec> {
    let spec = &policy.spec;
    let mut matchers = Vec::with_capacity(spec.matchers.len());
    for (i, m) in spec.matchers.iter().enumerate() {
        let mut group = Vec::with_capacity(m.conditions.len());
        for (j, c) in m.conditions.iter().enumerate() {
            let field = format!("spec.matchers[{i}].conditions[{j}]");
            let for_ = match &c.for_ {
                None => None,
                Some(d) => Some(parse_go_duration(d).ok_or_else(|| InvalidSpec {
                    field: format!("{field}.for"),
                    message: format!(
                        "invalid duration {d:?}: use a Go duration such as 30s or 1m30s, at most 2562047h"
                    ),
                })?),
            };
            group.push(CompiledCondition {
                type_: c.type_.clone(),
                status_source: c.status.clone(),
                status: Pattern::new(&c.status, &format!("{field}.status"))?,
                reason: c
                    .reason
                    .as_deref()
                    .map(|r| Pattern::new(r, &format!("{field}.reason")))
                    .transpose()?,
                reason_source: c.reason.clone(),
                for_source: c.for_.clone(),
                for_,
                stale_after: stale_after(c.stale_after.as_deref(), &field)?,
            });
        }
        if group.is_empty() {
            return Err(InvalidSpec {
                field: format!("spec.matchers[{i}].conditions"),
                message: "must not be empty".into(),
            });
        }
        matchers.push(group);
    }
    let readiness = match &spec.readiness {
        None => None,
        Some(r) => {
            let conditions = r
                .conditions
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    Ok(CompiledReadinessCondition {
                        type_: c.type_.clone(),
                        status_source: c.status.clone(),
                        status: Pattern::new(
                            &c.status,
                            &format!("spec.readiness.conditions[{i}].status"),
                        )?,
                        stale_after: stale_after(
                            c.stale_after.as_deref(),
                            &format!("spec.readiness.conditions[{i}]"),
                        )?,
                    })
                })
                .collect::<Result<Vec<_>, InvalidSpec>>()?;
            let critical_pods = r
                .critical_pods
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    check(
                        &p.selector,
                        &format!("spec.readiness.criticalPods[{i}].selector"),
                    )?;
                    Ok(CompiledCriticalPod {
                        name: p.name.clone(),
                        namespace: p.namespace.clone(),
                        selector: Selector::new(Some(&p.selector)),
                        label_selector: selector_string(&p.selector),
                    })
                })
                .collect::<Result<Vec<_>, InvalidSpec>>()?;
            Some(Readiness {
                conditions,
                critical_pods,
            })
        }
    };
    if matchers.is_empty() && readiness.is_none() {
        return Err(InvalidSpec {
            field: "spec".into(),
            message: "at least one of spec.matchers or spec.readiness must be given".into(),
        });
    }
    if let Some(selector) = &spec.node_selector {
        check(selector, "spec.nodeSelector")?;
    }
    let eviction = spec
        .eviction
        .as_ref()
        .map(EvictionRules::compile)
        .transpose()?;
    let clear_after = match &spec.clear_after {
        None => DEFAULT_CLEAR_AFTER,
        Some(d) => parse_go_duration(d).ok_or_else(|| InvalidSpec {
            field: "spec.clearAfter".into(),
            message: format!(
                "invalid duration {d:?}: use a Go duration such as 2m or 0s, at most 2562047h"
            ),
        })?,
    };
    let reads_staleness = matchers.iter().flatten().any(|c| c.stale_after.is_some())
        || readiness
            .iter()
            .flat_map(|r| &r.conditions)
            .any(|c| c.stale_after.is_some());
    Ok(Rules {
        node_selector: Selector::new(spec.node_selector.as_ref()),
        matchers,
        readiness,
        max_tainted_nodes: spec.max_tainted_nodes.clone(),
        eviction,
        reads_staleness,
        clear_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_word_patterns_match_like_their_regex() {
        let patterns = [
            "True",
            "Kaput|Ruined",
            "False|Unknown|",
            "",
            "Kubelet.*",
            "a-b_c|D9",
            "(True)",
            "T.ue",
        ];
        let haystacks = [
            "True",
            "NotTrue",
            "Truely",
            "true",
            "Kaput",
            "Ruined",
            "Kaput|Ruined",
            "False",
            "Unknown",
            "",
            "KubeletReady",
            "Kubelet",
            "a-b_c",
            "D9",
            "D",
            "Tnue",
            "(True)",
        ];
        for pattern in patterns {
            let p = Pattern::new(pattern, "f").unwrap();
            let regex = anchored(pattern, "f").unwrap();
            for h in haystacks {
                assert_eq!(p.is_match(h), regex.is_match(h), "{pattern:?} on {h:?}");
            }
        }
        assert!(Pattern::new("Kaput|Ruined", "f").unwrap().words.is_some());
        assert!(Pattern::new("Endpoint.*", "f").unwrap().words.is_none());
    }
}
