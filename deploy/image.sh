#!/usr/bin/env bash
# deploy/image.sh — the OCI image (issue 52), built from what the project already trusts:
# Debian's packages (mmdebstrap, bookworm, minbase, python3 and python3-venv) plus the
# project's own wheel and its dependencies from PyPI.  No base image is pulled.
#
#   bash deploy/image.sh            # `make image`: build it unless it is built, print its tag
#   bash deploy/image.sh --key      # print the tag this checkout's wheel gives, build nothing
#
# Two layers of cache, both under ~/.cache/toolsrv/image/ ($TOOLSRV_IMAGE_CACHE):
#   - the Debian rootfs (rootfs-bookworm-RECIPE.tar, ~130 MB, 100-270 s here), made once;
#   - the image itself, tagged localhost/toolsrv:KEY in podman's storage, where KEY is a
#     hash of the wheel's RECORD (every installed file's sha256: the same sources give the
#     same key whatever the build's timestamps).  An image with that tag is never rebuilt.
# `localhost/toolsrv:latest` is moved to the newest build.
#
# The image runs `toolsrv serve -a unix!/run/toolsrv/toolsrv` as root (tools run as nobody):
# mount a directory on /run/toolsrv to reach the socket from outside.  What it must be
# granted to sandbox its tools is in doc/hosts.md, Running a fleet (tests/deploy/
# test_image.py holds it).
#
# Needs, as root: mmdebstrap, podman, runc, uidmap (installed with apt-get when missing).
# A non-root user needs them installed, a subuid/subgid range (/etc/subuid), and
# `mmdebstrap --mode=unshare` (chosen here when not root); podman then runs rootless.
# Only the root path is tested (tests/deploy/test_image.py).
set -euo pipefail
# the whole script is one block, read before any of it runs: an edit while it runs (a
# shared checkout) cannot change what it does half-way
{

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${TOOLSRV_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolsrv/image}
WH=${TOOLSRV_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolsrv/deploy-wheels}
PIP_PY=${PIP_PY:-$REPO/.venv/bin/python}
[ -x "$PIP_PY" ] || PIP_PY=$(command -v python3)
SUITE=bookworm
PACKAGES=python3,python3-venv
# the rootfs's recipe: a change to the mmdebstrap lines below bumps it (a new cache file)
RECIPE=2
ONLY_KEY=
[ "${1:-}" = --key ] && ONLY_KEY=1

say() { echo "image: $*" >&2; }
die() { echo "image: FAILED: $*" >&2; exit 1; }
# outside the project (a registry or mirror unreachable): exit 3, which the test skips on
outside() { echo "image: FAILED, outside the project: $*" >&2; exit 3; }

need() {
    local missing=()
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    command -v newuidmap >/dev/null || missing+=(uidmap)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: as root, apt-get install -y ${missing[*]}"
    say "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
        >/dev/null || outside "apt-get install ${missing[*]}"
}

T=$(mktemp -d "${TMPDIR:-/tmp}/toolsrv-image.XXXXXX")
trap 'rm -rf "$T"' EXIT

# --- the wheel and its key -------------------------------------------------------------------
mkdir -p "$T/src" "$T/dist"
tar -C "$REPO" --exclude=./.venv --exclude=./build --exclude=./dist --exclude=./.git \
    --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache \
    --exclude=.hypothesis -cf - . | tar -C "$T/src" -xf -
ISOLATION=
"$PIP_PY" -c 'import setuptools, sys
sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null \
    && ISOLATION=--no-build-isolation
(cd "$T/src" && "$PIP_PY" -m pip wheel -q --no-deps $ISOLATION -w "$T/dist" . >"$T/wheel.log" 2>&1) \
    || { cat "$T/wheel.log" >&2; die "pip wheel --no-deps ."; }
WHL=$(ls "$T"/dist/toolsrv-*.whl)
KEY=$("$PIP_PY" - "$WHL" "$SUITE" "$PACKAGES" "$RECIPE" <<'EOF'
import hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
rec = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
lines = sorted(ln for ln in z.read(rec).decode().splitlines() if not ln.startswith(rec))
h = hashlib.sha256("\n".join(lines + sys.argv[2:]).encode())
print(h.hexdigest()[:16])
EOF
)
TAG=localhost/toolsrv:$KEY
if [ -n "$ONLY_KEY" ]; then echo "$TAG"; exit 0; fi

need
if podman image exists "$TAG"; then
    say "$TAG is built (the wheel is unchanged)"
    echo "$TAG"
    exit 0
fi

# --- the Debian rootfs, once ---------------------------------------------------------------
mkdir -p "$CACHE"
BASE=$CACHE/rootfs-$SUITE-$RECIPE.tar
if [ ! -s "$BASE" ]; then
    rm -f "$CACHE"/rootfs-"$SUITE"-*.tar     # an older recipe's
    say "building the Debian $SUITE rootfs (minbase, $PACKAGES) into $BASE"
    MODE=()
    [ "$(id -u)" = 0 ] || MODE=(--mode=unshare)
    # merged /usr by mmdebstrap's own hook: the usrmerge package would bring the whole of
    # perl (~50 MB) into the image; documentation and translations are not needed at all
    mmdebstrap "${MODE[@]}" --format=tar --variant=minbase --include="$PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --customize-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/*' \
        "$SUITE" "$BASE.tmp" >"$T/mmdebstrap.log" 2>&1 \
        || { tail -20 "$T/mmdebstrap.log" >&2; rm -rf "$BASE.tmp"
             grep -qE 'Failed to fetch|Could not resolve|Temporary failure|Unable to connect' \
                 "$T/mmdebstrap.log" && outside "mmdebstrap: Debian's mirror unreachable"
             die "mmdebstrap (see above)"; }
    mv "$BASE.tmp" "$BASE"
fi

# --- the dependencies, from the deploy check's wheelhouse (filled through pip) -------------
mkdir -p "$WH" "$T/wheels"
if ! "$PIP_PY" -m pip download -q --no-index --find-links "$WH" -d "$T/wheels" "$WHL" \
        >"$T/deps.log" 2>&1; then
    say "filling the wheelhouse $WH"
    "$PIP_PY" -m pip wheel -q -w "$WH" "$WHL" >>"$T/deps.log" 2>&1 \
        || { tail -20 "$T/deps.log" >&2; outside "pip wheel of the dependencies (PyPI unreachable?)"; }
    rm -f "$WH"/toolsrv-*.whl
    "$PIP_PY" -m pip download -q --no-index --find-links "$WH" -d "$T/wheels" "$WHL" \
        >>"$T/deps.log" 2>&1 || { tail -20 "$T/deps.log" >&2; die "pip download"; }
fi

# --- the rootfs with a venv holding the wheel ----------------------------------------------
# Unpacked and entered with chroot (root) or `podman unshare` (a user: its own subuids).
R=$T/rootfs
mkdir "$R"
tar -C "$R" -xf "$BASE"
cp "$T"/wheels/*.whl "$R/tmp/"
ENTER=(chroot "$R")
[ "$(id -u)" = 0 ] || ENTER=(podman unshare chroot "$R")
"${ENTER[@]}" /bin/sh -ec '
    python3 -m venv /opt/toolsrv
    /opt/toolsrv/bin/pip install -q --no-index --no-compile --find-links /tmp toolsrv
    /opt/toolsrv/bin/pip uninstall -q -y setuptools pip
    rm -f /tmp/*.whl
    rm -rf /root/.cache
    mkdir -p /run/toolsrv /work
    chmod 755 /run/toolsrv /work
' >"$T/venv.log" 2>&1 || { cat "$T/venv.log" >&2; die "the venv inside the rootfs"; }
# the compiled bytecode is made once here, not by every start (--no-compile above skips
# pip's pass over files a read-only image could not write later anyway)
"${ENTER[@]}" /opt/toolsrv/bin/python -m compileall -q /opt/toolsrv/lib >/dev/null 2>&1 || true

# --- the image -------------------------------------------------------------------------------
tar -C "$R" -cf "$T/image.tar" .
podman import -q \
    --change 'ENV PATH=/opt/toolsrv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV HOME=/root' \
    --change 'WORKDIR /work' \
    --change 'VOLUME /run/toolsrv' \
    --change 'ENTRYPOINT ["/opt/toolsrv/bin/toolsrv"]' \
    --change 'CMD ["serve", "-a", "unix!/run/toolsrv/toolsrv"]' \
    --change "LABEL org.opencontainers.image.title=toolsrv toolsrv.wheel=$(basename "$WHL")" \
    "$T/image.tar" "$TAG" >/dev/null || die "podman import"
podman tag "$TAG" localhost/toolsrv:latest
# the images of older wheels go: each is ~200 MB
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' localhost/toolsrv); do
    case $old in "$TAG"|localhost/toolsrv:latest) ;; *) podman rmi -f "$old" >/dev/null 2>&1 || true ;; esac
done
SIZE=$(podman image inspect --format '{{.Size}}' "$TAG")
say "built $TAG ($((SIZE / 1000000)) MB); run it with the flags in doc/hosts.md, Running a fleet"
echo "$TAG"
exit
}
