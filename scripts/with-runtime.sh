#!/usr/bin/env bash
# Runs a command with one of the JavaScript runtimes the runtime tests and the examples use first
# on PATH, at the version pinned here, without adding it to the project's dependencies:
#   scripts/with-runtime.sh deno deno run --allow-net main.ts
#   scripts/with-runtime.sh --which workerd      # prints the binary's path
# The binary comes from the registry: the runtime's npm package (workerd, deno, bun), whose
# optional dependencies hold one platform's binary, installed once with npm (no install scripts)
# into a cache folder outside the project, as scripts/with-node.sh does for Node lines.
set -euo pipefail
usage="usage: scripts/with-runtime.sh <workerd|deno|bun> <command...>  |  scripts/with-runtime.sh --which <workerd|deno|bun>"
which_only=0
if [ "${1:-}" = "--which" ]; then which_only=1; shift; fi
name="${1:?$usage}"
shift
case "$name" in
  workerd) version=1.20261023.1 ;;
  deno) version=2.9.5 ;;
  bun) version=1.4.5 ;;
  *) echo "with-runtime: unknown runtime '$name' (workerd, deno or bun)" >&2; exit 2 ;;
esac
if [ "$which_only" = 0 ] && [ "$#" = 0 ]; then echo "$usage" >&2; exit 2; fi

root="${MCW_RUNTIME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mailchannels-webhooks/runtimes}"
cache="$root/$name-$version"

# Where each package puts its binary (the platform package npm picked for this machine).
find_bin () {
  local m="$cache/node_modules" f
  case "$name" in
    workerd) for f in "$m"/@cloudflare/workerd-*/bin/workerd; do [ -x "$f" ] && { echo "$f"; return 0; }; done ;;
    deno) for f in "$m"/@deno/*/deno; do [ -x "$f" ] && { echo "$f"; return 0; }; done ;;
    bun) for f in "$m"/@oven/bun-*/bin/bun; do [ -x "$f" ] && { echo "$f"; return 0; }; done ;;
  esac
  return 1
}

if ! bin="$(find_bin)"; then
  # Installed into a fresh folder, then renamed into place: test files that start at the same
  # time never see (or make) a half-installed cache.
  mkdir -p "$root"
  tmp="$(mktemp -d "$root/.$name-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "with-runtime: installing $name@$version into $cache" >&2
  # --include=optional: the binary is an optional dependency, whatever the npm config omits.
  if ! npm install --prefix "$tmp" --no-save --no-package-lock --no-audit --no-fund --ignore-scripts --include=optional --loglevel=error "$name@$version" >&2; then
    echo "with-runtime: could not install $name@$version from the npm registry (see above)" >&2
    exit 3
  fi
  # Some packages lose the executable bit in the registry's tarballs.
  chmod +x "$tmp"/node_modules/@cloudflare/workerd-*/bin/workerd "$tmp"/node_modules/@deno/*/deno "$tmp"/node_modules/@oven/bun-*/bin/bun 2>/dev/null || true
  # Another run may have put it there first: then this copy is dropped.
  if [ ! -e "$cache" ]; then mv "$tmp" "$cache" 2>/dev/null || true; fi
  rm -rf "$tmp"
  trap - EXIT
  if ! bin="$(find_bin)"; then
    echo "with-runtime: $name@$version has no binary for $(uname -s)-$(uname -m) in the registry" >&2
    exit 3
  fi
fi

if [ "$which_only" = 1 ]; then
  echo "$bin"
  exit 0
fi
PATH="$(dirname "$bin"):$PATH" exec "$@"
