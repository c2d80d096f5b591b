#!/bin/sh
# tests/deps.sh PKG...: install the Debian packages that are missing.
# As root it runs apt-get (update first); otherwise it prints the exact
# command to run and fails, so a build never half-works.
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "tfg needs these packages:$missing" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null
