#!/usr/bin/env bash
# Builds the control-plane binaries used by the test harness from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), plus kwok's default stages, and the
# helm client (helm.sh/helm/v4) the chart's tests run.
#
# Usage: build.sh [OUT_DIR]
# Prints the directory holding the binaries on its last line. Idempotent: when every binary is
# already in OUT_DIR it builds nothing. The versions are pinned by the go.mod files beside this
# script; OUT_DIR defaults to $HOME/.cache/dynamo-operator-rs/controlplane/<versions>.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pinned() { sed -nE "s#^(require)?[[:space:]]*$2 (v[0-9][0-9.]*)( .*)?\$#\\2#p" "$HERE/$1/go.mod" | head -1; }
K8S=$(pinned k8s k8s.io/kubernetes)
ETCD=$(pinned etcd go.etcd.io/etcd/server/v3)
KWOK=$(pinned kwok sigs.k8s.io/kwok)
[ -n "$K8S" ] && [ -n "$ETCD" ] && [ -n "$KWOK" ] || { echo "build.sh: cannot read pinned versions" >&2; exit 1; }
OUT=${1:-${HOME}/.cache/dynamo-operator-rs/controlplane/k8s-$K8S-etcd-$ETCD-kwok-$KWOK}

BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwok-stages.yaml helm)
complete() { for b in "${BINS[@]}"; do [ -s "$OUT/$b" ] || return 1; done; }
if complete; then echo "$OUT"; exit 0; fi

export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$OUT"
TMP=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
log() { echo "[controlplane] $(date +%T) $*" >&2; }

MINOR=$(echo "$K8S" | cut -d. -f2)
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=$MINOR -X k8s.io/component-base/version.gitTreeState=clean"

if [ ! -s "$OUT/etcd" ]; then
  log "building etcd $ETCD"
  (cd "$HERE/etcd" && go build -trimpath -ldflags "-s -w" -o "$TMP/etcd" go.etcd.io/etcd/server/v3)
  mv "$TMP/etcd" "$OUT/etcd"
fi

if [ ! -s "$OUT/kwok" ] || [ ! -s "$OUT/kwok-stages.yaml" ]; then
  log "building kwok $KWOK"
  (cd "$HERE/kwok" && go build -trimpath -ldflags "-s -w" -o "$TMP/kwok" sigs.k8s.io/kwok/cmd/kwok)
  DIR=$(cd "$HERE/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  S="$DIR/kustomize/stage"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    cat "$S/$f.yaml"; echo "---"
  done >"$TMP/kwok-stages.yaml"
  mv "$TMP/kwok" "$OUT/kwok"; mv "$TMP/kwok-stages.yaml" "$OUT/kwok-stages.yaml"
fi

if [ ! -s "$OUT/helm" ]; then
  log "building helm $(pinned helm helm.sh/helm/v4)"
  (cd "$HERE/helm" && go build -trimpath -ldflags "-s -w" -o "$TMP/helm" helm.sh/helm/v4/cmd/helm)
  mv "$TMP/helm" "$OUT/helm"
fi

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  if [ ! -s "$OUT/$b" ]; then
    log "building $b $K8S (the first build of the k8s tree takes 10-20 minutes)"
    (cd "$HERE/k8s" && go build -pgo=off -trimpath -ldflags "$LDF" -o "$TMP/$b" "k8s.io/kubernetes/cmd/$b")
    mv "$TMP/$b" "$OUT/$b"
  fi
done

complete || { echo "build.sh: incomplete build in $OUT" >&2; exit 1; }
log "done: $OUT"
echo "$OUT"
