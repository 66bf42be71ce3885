//! One version everywhere a user reads one: the binary (`taint-operator --version`,
//! the crate's version), the image tag (the chart's `appVersion`, which
//! scripts/build-image.sh tags the image with) and the newest CHANGELOG entry.

use std::{fs, path::Path};

fn repo_file(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// `appVersion` of charts/taint-operator/Chart.yaml, quotes stripped.
fn chart_app_version() -> String {
    repo_file("charts/taint-operator/Chart.yaml")
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("Chart.yaml has an appVersion")
}

/// The version of CHANGELOG.md's first `## [X.Y.Z] - date` heading.
fn newest_changelog_entry() -> String {
    repo_file("CHANGELOG.md")
        .lines()
        .find_map(|l| l.strip_prefix("## ["))
        .and_then(|rest| rest.split(']').next())
        .map(str::to_string)
        .expect("CHANGELOG.md has a `## [version]` entry")
}

#[test]
fn the_binary_the_image_and_the_changelog_agree() {
    let binary = env!("CARGO_PKG_VERSION");
    assert_eq!(chart_app_version(), binary, "Chart.yaml appVersion");
    assert_eq!(
        newest_changelog_entry(),
        binary,
        "CHANGELOG.md's newest entry"
    );
}

#[test]
fn the_changelog_links_every_version_it_names() {
    let changelog = repo_file("CHANGELOG.md");
    for version in changelog.lines().filter_map(|l| l.strip_prefix("## [")) {
        let version = version.split(']').next().unwrap_or_default();
        assert!(
            changelog.contains(&format!("\n[{version}]: ")),
            "CHANGELOG.md names {version} without a link line"
        );
    }
}
