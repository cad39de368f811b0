# Shared set-up for scripts/demo and scripts/test: sourced, not run.
# Creates .venv with a Python >= 3.11 and installs the project (with the extras asked for).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

find_python() {
  for py in python3.13 python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "scale-agent needs Python 3.11 or newer on PATH" >&2
  return 1
}

# ensure_venv EXTRAS: install the project into .venv; pip skips what is already satisfied.
ensure_venv() {
  local extras="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    "$(find_python)" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
  fi
  local target="$ROOT"
  [ -n "$extras" ] && target="$ROOT[$extras]"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e "$target"
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

# kubectl is a test peer (kubesim must satisfy it); Debian ships it as kubernetes-client.
ensure_kubectl() {
  command -v kubectl >/dev/null 2>&1 && return 0
  echo "installing kubectl (Debian package kubernetes-client)..." >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null
}

# The dashboard's browser tests (tests/browser) drive a real Chromium through chromedriver, both
# Debian's packages: Selenium is given their paths, so nothing downloads a browser of its own.
ensure_browser() {
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
  echo "installing chromium and chromedriver (Debian packages chromium, chromium-driver)..." >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
}

# Debian's kubectl (1.20) speaks only OpenAPI v2: the suite also runs the kubectl checks with it,
# unpacked under .cache without installing it, so kubesim stays right for old and new clients.
fetch_debian_kubectl() {
  local dest="$ROOT/.cache/kubectl-debian"
  if [ ! -x "$dest/usr/bin/kubectl" ] && command -v apt-get >/dev/null 2>&1; then
    local tmp; tmp="$(mktemp -d)"
    if ! (cd "$tmp" && apt-get download -qq kubernetes-client >/dev/null 2>&1); then
      as_root apt-get update -qq >/dev/null 2>&1 || true
      (cd "$tmp" && apt-get download -qq kubernetes-client >/dev/null 2>&1) || true
    fi
    if ls "$tmp"/kubernetes-client_*.deb >/dev/null 2>&1; then
      mkdir -p "$dest" && dpkg -x "$tmp"/kubernetes-client_*.deb "$dest"
    else
      echo "note: could not fetch Debian's kubectl; its compatibility run is skipped" >&2
    fi
    rm -rf "$tmp"
  fi
  if [ -x "$dest/usr/bin/kubectl" ]; then
    export SCALE_AGENT_EXTRA_KUBECTLS="$dest/usr/bin/kubectl"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The integration tests use the local PostgreSQL and MariaDB; start them when they are down.
ensure_databases() {
  if ! port_open 5432 && [ -d /etc/postgresql ]; then
    as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
  if ! port_open 3306 && [ -x /usr/sbin/mariadbd ]; then
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  fi
}

# The e2e tests run the agent and the hub against a real control plane too (scripts/real-cluster):
# built once per machine (cached under ~/.cache/scale-agent), started on free loopback ports for
# this run, with a node so that pods run, and stopped when it ends. A cluster named by SCALE_AGENT_E2E_KUBECONFIG is used instead;
# SCALE_AGENT_E2E_REAL_CLUSTER=0 skips it (the real-server tests then say they were skipped).
ensure_real_cluster() {
  [ -n "${SCALE_AGENT_E2E_KUBECONFIG:-}" ] && return 0
  if [ "${SCALE_AGENT_E2E_REAL_CLUSTER:-1}" = 0 ]; then
    echo "note: SCALE_AGENT_E2E_REAL_CLUSTER=0: the tests against a real apiserver are skipped" >&2; return 0
  fi
  REAL_CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/scale-agent-real-cluster.XXXXXX")"
  local node=(--with-node)  # pods really run (docs/real-cluster.md); SCALE_AGENT_E2E_NODE=0: no node
  [ "${SCALE_AGENT_E2E_NODE:-1}" != 0 ] || node=()
  if "$ROOT/scripts/real-cluster" start --dir "$REAL_CLUSTER_DIR" "${node[@]}" > "$REAL_CLUSTER_DIR/env"; then
    # shellcheck disable=SC1091
    source "$REAL_CLUSTER_DIR/env"
  elif [ -n "${CI:-}" ]; then
    echo "the real control plane could not be started (logs in $REAL_CLUSTER_DIR)" >&2; return 1
  else
    echo "note: the real control plane could not be started; its tests are skipped" >&2
  fi
}

stop_real_cluster() {
  if [ -n "${REAL_CLUSTER_DIR:-}" ]; then
    "$ROOT/scripts/real-cluster" stop --dir "$REAL_CLUSTER_DIR" 2>/dev/null || true
    rm -rf "$REAL_CLUSTER_DIR"
  fi
}

# The container image (Containerfile, docs/container-image.md), built for this run with
# scripts/image on a base made from Debian's packages (cached under ~/.cache/scale-agent/image:
# only a new machine pays for it), for tests/e2e/test_image.py: run with podman, or from its
# unpacked root filesystem (.cache/image) when containers cannot run here. Tagged per checkout,
# so that two checkouts testing at once on one machine each test their own.
# SCALE_AGENT_E2E_IMAGE_TESTS=0 skips it; under CI a build that fails fails the run.
ensure_image() {
  if [ "${SCALE_AGENT_E2E_IMAGE_TESTS:-1}" = 0 ]; then
    echo "note: SCALE_AGENT_E2E_IMAGE_TESTS=0: the container image is neither built nor tested" >&2; return 0
  fi
  local dir="$ROOT/.cache/image" tag image runner
  tag="localhost/scale-agent:test-$(printf %s "$ROOT" | sha256sum | cut -c1-12)"
  mkdir -p "$dir"
  if image="$(IMAGE_BUILD_LOG="$dir/build.log" "$ROOT/scripts/image" build --tag "$tag")" &&
     runner="$("$ROOT/scripts/image" probe --tag "$image")" &&
     { [ "$runner" != chroot ] || "$ROOT/scripts/image" unpack --tag "$image" --dir "$dir" >/dev/null; }; then
    export SCALE_AGENT_E2E_IMAGE="$image" SCALE_AGENT_E2E_IMAGE_RUNNER="$runner"
    [ "$runner" != chroot ] || export SCALE_AGENT_E2E_IMAGE_ROOTFS="$dir/bundle/rootfs"
    echo "container image $image, run with $runner" >&2
  elif [ -n "${CI:-}" ]; then
    tail -40 "$dir/build.log" >&2 2>/dev/null || true
    echo "the container image could not be built or run (log: $dir/build.log)" >&2; return 1
  else
    echo "note: the container image could not be built or run (log: $dir/build.log); its tests are skipped" >&2
  fi
}
