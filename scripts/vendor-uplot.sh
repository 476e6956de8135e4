#!/usr/bin/env bash
# Fetch uPlot's release from the npm registry again and check it against the vendored copy
# (src/commlens/serve/static/vendor/uplot/VENDORED.md lists the checksums).
set -euo pipefail
version=1.6.32
dest=src/commlens/serve/static/vendor/uplot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS -o "$tmp/uplot.tgz" "https://registry.npmjs.org/uplot/-/uplot-$version.tgz"
echo "4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d  $tmp/uplot.tgz" | sha256sum -c -
tar -xzf "$tmp/uplot.tgz" -C "$tmp"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$dest/"
(cd "$dest" && sha256sum -c - <<SUMS
19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f  uPlot.iife.min.js
df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04  uPlot.min.css
SUMS
)
