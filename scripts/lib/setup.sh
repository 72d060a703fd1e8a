# Sourced by scripts/run-demo and scripts/run-tests: installs missing Debian packages, then
# configures and builds into $LPDIAG_BUILD (default: build/). Cheap when nothing changed.
set -euo pipefail

LPDIAG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LPDIAG_BUILD=${LPDIAG_BUILD:-$LPDIAG_ROOT/build}
LPDIAG_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libhdf5-dev hdf5-tools python3-h5py zlib1g-dev
  libeigen3-dev libfmt-dev nlohmann-json3-dev libcli11-dev catch2
  libtorch-dev python3-torch python3-pip python3-setuptools
  clang-14 libclang-rt-14-dev
  chromium
)

lpdiag_log() { printf '[lpdiag] %s\n' "$*" >&2; }

lpdiag_install_packages() {
  local missing=()
  for p in "${LPDIAG_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  lpdiag_log "installing Debian packages: ${missing[*]}"
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

lpdiag_build() {
  if [[ ! -f "$LPDIAG_BUILD/build.ninja" ]]; then
    lpdiag_log "configuring in $LPDIAG_BUILD"
    cmake -S "$LPDIAG_ROOT" -B "$LPDIAG_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LPDIAG_CMAKE_ARGS:-}
  fi
  lpdiag_log "building"
  cmake --build "$LPDIAG_BUILD" -j "$(nproc)"
}

lpdiag_setup() {
  lpdiag_install_packages
  lpdiag_build
}
