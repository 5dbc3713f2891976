#!/usr/bin/env bash
# Build and tag every SMetric image (images/*.Dockerfile) from the repository root; optionally push.
#
#   images/build.sh [--registry PREFIX] [--version VERSION] [--push] [--dry-run] [IMAGE...]
#
#   --registry PREFIX  image name prefix, e.g. registry.example.com/smetric (default ghcr.io/smetric,
#                      the name the operator's defaults, the chart and manifests/ use)
#   --version VERSION  tag of the SMetric images (default: pyproject.toml's version)
#   --push             docker push every tag after building it
#   --dry-run          print the docker commands instead of running them (no docker needed)
#   IMAGE              Dockerfile stems to build (default all): operator epp emulator sim
#                      engine-lmcache mooncake
#
# Tags (PREFIX/NAME:TAG), one per image; the pinned upstream versions come from the Dockerfiles'
# ARG defaults, so a tag always names what its image holds:
#   operator        PREFIX/smetric-operator:VERSION
#   epp             PREFIX/smetric-epp:VERSION
#   emulator        PREFIX/smetric-emulator:VERSION
#   sim             PREFIX/smetric-sim:VERSION
#   engine-lmcache  PREFIX/vllm-lmcache:<vLLM tag>-lmcache<LMCACHE_VERSION>-mooncake<MOONCAKE_VERSION>-<cuda>
#   mooncake        PREFIX/mooncake-master:<MOONCAKE_VERSION>-<cuda>
# where <cuda> is the Mooncake wheel's CUDA flavour (mooncake-transfer-engine-cuda13 -> cuda13).
# The last lines printed are "image STEM REF", one per image built.
# Checked by tests/unit/project/test_images_build.py (dry run; the samples use these tags).
set -euo pipefail
shopt -s inherit_errexit  # a failed $(...) (a missing Dockerfile ARG) stops the script

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALL=(operator epp emulator sim engine-lmcache mooncake)
REGISTRY=ghcr.io/smetric
VERSION=""
PUSH=0
DRY=0
IMAGES=()

die() { echo "images/build.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --registry) [ $# -ge 2 ] || die "--registry needs a value"; REGISTRY="$2"; shift 2 ;;
    --registry=*) REGISTRY="${1#*=}"; shift ;;
    --version) [ $# -ge 2 ] || die "--version needs a value"; VERSION="$2"; shift 2 ;;
    --version=*) VERSION="${1#*=}"; shift ;;
    --push) PUSH=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) IMAGES+=("$1"); shift ;;
  esac
done

# A Docker reference: lowercase name components joined by / (a host may carry a port), a tag of
# [A-Za-z0-9_.-] up to 128 characters not starting with . or -.
[[ "$REGISTRY" =~ ^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$ ]] \
  || die "--registry '$REGISTRY' is not an image name prefix (lowercase, e.g. registry.example.com/smetric)"
if [ -z "$VERSION" ]; then
  VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
  [ -n "$VERSION" ] || die "no version in pyproject.toml; pass --version"
fi
[[ "$VERSION" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--version '$VERSION' is not a valid tag"
[ ${#IMAGES[@]} -gt 0 ] || IMAGES=("${ALL[@]}")
for stem in "${IMAGES[@]}"; do
  [[ " ${ALL[*]} " == *" $stem "* ]] || die "unknown image '$stem' (one of: ${ALL[*]})"
done

# The value of "ARG NAME=value" in a Dockerfile; fails when it is absent.
arg_default() {
  local value
  value="$(sed -n "s/^ARG $2=\(.*\)$/\1/p" "$ROOT/images/$1.Dockerfile" | head -n 1)"
  [ -n "$value" ] || die "images/$1.Dockerfile has no 'ARG $2=' default"
  printf '%s' "$value"
}

# The CUDA flavour of the Mooncake wheel a Dockerfile installs (mooncake-transfer-engine-cudaNN).
mooncake_cuda() {
  local flavour
  flavour="$(grep -o 'mooncake-transfer-engine-cuda[0-9]\+' "$ROOT/images/$1.Dockerfile" | head -n 1)"
  [ -n "$flavour" ] || die "images/$1.Dockerfile installs no mooncake-transfer-engine-cudaNN wheel"
  printf '%s' "${flavour#mooncake-transfer-engine-}"
}

tag_of() {
  local vllm lmcache mooncake cuda
  case "$1" in
    operator|epp|emulator|sim) printf '%s/smetric-%s:%s' "$REGISTRY" "$1" "$VERSION" ;;
    engine-lmcache)
      vllm="$(arg_default engine-lmcache VLLM_IMAGE)"
      lmcache="$(arg_default engine-lmcache LMCACHE_VERSION)"
      mooncake="$(arg_default engine-lmcache MOONCAKE_VERSION)"
      cuda="$(mooncake_cuda engine-lmcache)"
      printf '%s/vllm-lmcache:%s-lmcache%s-mooncake%s-%s' "$REGISTRY" "${vllm##*:}" "$lmcache" "$mooncake" "$cuda" ;;
    mooncake)
      mooncake="$(arg_default mooncake MOONCAKE_VERSION)"
      cuda="$(mooncake_cuda mooncake)"
      printf '%s/mooncake-master:%s-%s' "$REGISTRY" "$mooncake" "$cuda" ;;
  esac
}

run() {
  if [ "$DRY" = 1 ]; then
    printf '%q ' "$@" | sed 's/ $//'
    echo
  else
    "$@"
  fi
}

if [ "$DRY" = 0 ]; then
  command -v docker >/dev/null || die "docker not found (use --dry-run to print the commands)"
fi
TAGS=()
for stem in "${IMAGES[@]}"; do
  tag="$(tag_of "$stem")"
  TAGS+=("$tag")
done
cd "$ROOT"
for i in "${!IMAGES[@]}"; do
  run docker build -f "images/${IMAGES[$i]}.Dockerfile" -t "${TAGS[$i]}" .
  if [ "$PUSH" = 1 ]; then
    run docker push "${TAGS[$i]}"
  fi
done
for i in "${!IMAGES[@]}"; do
  echo "image ${IMAGES[$i]} ${TAGS[$i]}"
done
