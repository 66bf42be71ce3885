#!/usr/bin/env bash
# cargo deny check (advisories, bans, licenses, sources) per deny.toml, offline:
#
#   scripts/cargo-deny.sh [check names...]      # default: all four; .ci/run runs it
#
# Installs the pinned cargo-deny when the one on PATH is missing or another
# version. Advisories come from the RustSec database in $ADVISORY_DB, default
# ../shared/advisory-db beside the repository (a plain copy of the files, no git
# history); cargo-deny reads a database only as a git checkout in its own
# directory layout, so the files are committed into one under
# $CARGO_TARGET_DIR/advisory-dbs (default target/), dated by the snapshot.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

version=0.20.2
# cargo-deny's directory for the database of deny.toml's db-urls: the URL's last
# path segment and its xxHash64. Fixed for a given cargo-deny version and URL.
db_dir_name=advisory-db-3157b0e258782691

db="${ADVISORY_DB:-$repo/../shared/advisory-db}"
if [[ ! -d $db/crates ]]; then
    echo "cargo-deny.sh: no RustSec advisory database at $db (want its crates/ folder)." >&2
    echo "  It is the shared/ folder beside the repository clone; set ADVISORY_DB to use another copy." >&2
    echo "  To refresh or create it, see docs/operations.md, 'Supply chain'." >&2
    exit 1
fi

if [[ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $version" ]]; then
    echo "cargo-deny.sh: installing cargo-deny $version"
    cargo install --locked --quiet cargo-deny --version "$version"
fi

# The snapshot's date, from its SOURCE.md ("as of commit ... (YYYY-MM-DD)"):
# cargo-deny judges staleness (deny.toml's maximum-db-staleness) by the commit date.
snapshot_date=$(grep -oE '\(20[0-9]{2}-[0-9]{2}-[0-9]{2}\)' "$db/SOURCE.md" 2>/dev/null | head -1 | tr -d '()' || true)
if [[ -z $snapshot_date ]]; then
    echo "cargo-deny.sh: $db/SOURCE.md names no snapshot date (YYYY-MM-DD); cannot tell how stale it is" >&2
    exit 1
fi
age_days=$(( ($(date -u +%s) - $(date -u -d "$snapshot_date" +%s)) / 86400 ))
if (( age_days > 90 )); then
    echo "cargo-deny.sh: warning: the advisory database is from $snapshot_date, $age_days days old; refresh it (docs/operations.md, 'Supply chain')" >&2
fi

dbs="${CARGO_TARGET_DIR:-$repo/target}/advisory-dbs"
checkout="$dbs/$db_dir_name"
rm -rf "$checkout"
mkdir -p "$checkout"
cp -R "$db/crates" "$db/rust" "$checkout/"
chmod -R u+w "$checkout"
(
    cd "$checkout"
    export GIT_AUTHOR_NAME=advisory-db GIT_AUTHOR_EMAIL=advisory-db@localhost
    export GIT_COMMITTER_NAME=advisory-db GIT_COMMITTER_EMAIL=advisory-db@localhost
    export GIT_AUTHOR_DATE="${snapshot_date}T00:00:00Z" GIT_COMMITTER_DATE="${snapshot_date}T00:00:00Z"
    git init --quiet --initial-branch=main .
    git add --all
    git -c commit.gpgsign=false commit --quiet --no-verify -m "RustSec advisory database as of $snapshot_date"
    # cargo-deny dates a checkout without FETCH_HEAD by the later of its HEAD
    # commit and the HEAD file's mtime, which git just set to now.
    touch -d "${snapshot_date}T00:00:00Z" .git/HEAD
)

# Every crate, for every platform, must be on disk: cargo-deny runs cargo
# metadata offline (the registry itself is reachable, the advisory git remote is not).
cargo fetch --locked --quiet
if ! TAINT_OPERATOR_ADVISORY_DBS="$dbs" cargo deny --offline --locked --color never check "${@:-all}"; then
    echo "cargo-deny.sh: findings above: fix them, or justify each in deny.toml; 'repository is stale' means the advisory database needs a refresh (docs/operations.md, 'Supply chain')" >&2
    exit 1
fi
