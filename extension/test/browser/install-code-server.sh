#!/usr/bin/env bash
# Installs code-server VERSION from the npm registry into DIR, with no other
# network: code-server's install downloads ripgrep from GitHub, so Debian's
# `rg` stands in through the download cache that @vscode/ripgrep looks in
# first. Its native modules (node-pty, kerberos, ...) are compiled here.
#
#   install-code-server.sh 4.100.3 build/code-server
#
# Debian packages it needs: build-essential python3 libkrb5-dev ripgrep
# (and chromium for the browser test itself).
set -euo pipefail
version=${1:?usage: install-code-server.sh VERSION DIR}
dir=${2:?usage: install-code-server.sh VERSION DIR}

# What code-server 4.100.3's VS Code pins (lib/vscode/node_modules/@vscode/ripgrep:
# package.json "version" and lib/postinstall.js VERSION). Another code-server
# version may pin others: read them there.
ripgrep_package=1.15.11
ripgrep_release=v13.0.0-10

missing=()
command -v rg >/dev/null || missing+=(ripgrep)
command -v g++ >/dev/null && command -v make >/dev/null || missing+=(build-essential)
[ -e /usr/include/gssapi/gssapi.h ] || missing+=(libkrb5-dev)
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
    echo "install-code-server.sh: missing Debian packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
fi
case "$(uname -m)" in
    x86_64) target=x86_64-unknown-linux-musl ;;
    aarch64) target=aarch64-unknown-linux-musl ;;
    *) echo "install-code-server.sh: no ripgrep stand-in for $(uname -m)" >&2; exit 1 ;;
esac

cache="${TMPDIR:-/tmp}/vscode-ripgrep-cache-${ripgrep_package}"
asset="$cache/ripgrep-${ripgrep_release}-${target}.tar.gz"
if [ ! -e "$asset" ]; then
    mkdir -p "$cache"
    staging=$(mktemp -d)
    cp "$(command -v rg)" "$staging/rg"
    tar czf "$asset.tmp" -C "$staging" rg && mv "$asset.tmp" "$asset"
    rm -rf "$staging"
fi

mkdir -p "$dir"
cd "$dir"
[ -e package.json ] || echo '{"name": "code-server-for-tests", "private": true}' > package.json
# --unsafe-perm: code-server's postinstall refuses to run as root without it.
# npm_config_yes: node-pty's postinstall runs `npx node-gyp`, which would ask.
npm_config_yes=true npm install --unsafe-perm --no-audit --no-fund "code-server@${version}"
test -x node_modules/.bin/code-server
