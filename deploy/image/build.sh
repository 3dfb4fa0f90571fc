#!/usr/bin/env bash
# Build the pytest-llmsim image (deploy/image/Containerfile) from this checkout.
#
# With a Docker engine at hand: `docker build`. Without one (CI machines and sandboxes where base images cannot
# be pulled either): a slim Debian base made here from Debian's packages with mmdebstrap (python3 and its venv
# module, no documentation), imported into buildah, then `buildah bud --isolation chroot --format docker` (the
# docker format keeps the HEALTHCHECK, which the OCI format drops).
#
#   deploy/image/build.sh [TAG]            default tag: localhost/pytest-llmsim:VERSION
#   LLMSIM_IMAGE_SOURCE=URL                the image's source label (default: the git remote, else "unknown")
#   LLMSIM_IMAGE_BASE=IMAGE                build on this base instead (skips mmdebstrap)
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
tag="${1:-localhost/pytest-llmsim:$version}"
source="${LLMSIM_IMAGE_SOURCE:-$(git config --get remote.origin.url 2> /dev/null || echo unknown)}"
arguments=(--build-arg "VERSION=$version" --build-arg "SOURCE=$source" -f deploy/image/Containerfile -t "$tag")

# The wheels, built here (this machine's package index settings and certificates apply) when this Python is the
# image's (3.11); otherwise the image's first stage builds them from the index.
wheelhouse=deploy/image/wheelhouse
rm -f "$wheelhouse"/*.whl
if python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python3 -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$wheelhouse" ".[serve,tls]"
fi

if command -v docker > /dev/null && docker info > /dev/null 2>&1; then
    exec docker build "${arguments[@]}" .
fi
for tool in buildah mmdebstrap; do
    command -v "$tool" > /dev/null || { echo "build.sh: needs docker, or buildah and mmdebstrap (apt-get install buildah mmdebstrap)" >&2; exit 1; }
done

base="${LLMSIM_IMAGE_BASE:-localhost/llmsim-debian-base:bookworm}"
if [ -z "${LLMSIM_IMAGE_BASE:-}" ] && ! buildah inspect --type image "$base" > /dev/null 2>&1; then
    # What a Python server never runs: glibc's iconv charset modules (Python has its own codecs), Perl (only
    # packages' maintainer scripts use it, and the image installs no package), Python's lib2to3, pydoc topics, test
    # helpers and distutils (nothing here builds extensions).
    trim='rm -rf "$1"/usr/lib/*-linux-gnu/gconv "$1"/usr/lib/*-linux-gnu/perl-base "$1"/usr/bin/perl* \
        "$1"/usr/lib/python3.11/lib2to3 "$1"/usr/lib/python3.11/pydoc_data "$1"/usr/lib/python3.11/test \
        "$1"/usr/lib/python3.11/distutils'
    rootfs=$(mktemp --suffix=.tar)
    trap 'rm -f "$rootfs"' EXIT
    # Debian's Essential set, python3, python3-venv and libstdc++6 (google-re2 links it); merged /usr without the
    # usrmerge package (it would bring perl, 45 MB); no documentation, manual pages or translations.
    mmdebstrap --quiet --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --include=python3,python3-venv,libstdc++6 \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
        --customize-hook="$trim" \
        bookworm "$rootfs"
    container=$(buildah from scratch)
    buildah add --quiet "$container" "$rootfs" /
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/sh "$container"
    buildah commit --quiet "$container" "$base" > /dev/null
    buildah rm "$container" > /dev/null
fi
buildah bud --quiet --isolation chroot --format docker --build-arg "BASE=$base" "${arguments[@]}" .
echo "built $tag"
