#!/usr/bin/env bash
# Fetches into .debs/ (ignored by git) the Debian 12 packages that the GPU machine's build needs
# and its image lacks: the non-MPI, non-Gloo build's libraries and headers, their library
# dependencies, and pkgconf. tests/gpu/run_device_checks.sh unpacks them into a prefix there
# (that machine has no network; the lead passes carry [".debs"]). About 23 MiB.
#   tools/fetch_device_debs.sh [DIR]    (DIR defaults to .debs in the repository root)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
dir=${1:-.debs}
# Headers and link-time libraries (README.md's PACKAGES, less MPI, Gloo and the toolchain), the
# shared libraries they pull in, and pkg-config (the image may have none). Boost.Context is for
# the emulated device's kernels only (run_device_checks.sh --emulated rehearses from these .debs).
packages=(libfmt-dev libfmt9
          libboost1.74-dev libboost-test1.74-dev libboost-test1.74.0
          libopenblas-pthread-dev libopenblas0-pthread libgfortran5
          nlohmann-json3-dev libcli11-dev libsimdjson-dev libsimdjson14 libxxhash-dev libxxhash0
          libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2
          libboost-context1.74-dev libboost-context1.74.0
          pkgconf pkgconf-bin libpkgconf3)
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
apt-get download "${packages[@]}"
echo "fetch_device_debs: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dir"
