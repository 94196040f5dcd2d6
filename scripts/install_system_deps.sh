#!/usr/bin/env bash
# Installs the system packages caten_lab's tests use when they are missing (Graphviz's `dot`,
# Chromium for the browser test, clang for the libFuzzer run over the exported loader). Needs root or sudo and Debian/Ubuntu's apt; elsewhere it only
# says what is missing, and the tests that need it skip with that reason.
set -u
quiet=0; [ "${1:-}" = "--quiet" ] && quiet=1
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v clang >/dev/null 2>&1 || missing+=(clang)
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo -n"
  [ $quiet -eq 0 ] && echo "installing system packages: ${missing[*]}"
  if $SUDO apt-get update -qq >/dev/null 2>&1 && \
     DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
    exit 0
  fi
fi
echo "note: could not install ${missing[*]}; tests that need them will skip and say why" >&2
exit 0
