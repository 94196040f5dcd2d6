#!/usr/bin/env bash
# Installs the system packages caten_lab needs when they are missing. With --demo (`make demo`): only a C
# compiler. Otherwise (`make test`): also Graphviz's `dot`, Chromium for the browser test and clang for the
# libFuzzer run over the exported loader. Needs root or sudo and Debian/Ubuntu's apt; elsewhere it only
# says what is missing, and the tests that need it skip with that reason.
set -u
quiet=0; demo=0
for arg in "$@"; do
  case "$arg" in
    --quiet) quiet=1 ;;
    --demo) demo=1 ;;
  esac
done
missing=()
command -v "${CC:-cc}" >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing+=(gcc)
if [ $demo -eq 0 ]; then
  command -v dot >/dev/null 2>&1 || missing+=(graphviz)
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
  command -v clang >/dev/null 2>&1 || missing+=(clang)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo -n"
  [ $quiet -eq 0 ] && echo "installing system packages: ${missing[*]}"
  if $SUDO apt-get update -qq >/dev/null 2>&1 && \
     DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
    exit 0
  fi
fi
if [ $demo -eq 1 ]; then
  echo "note: could not install ${missing[*]}: the demo needs a C compiler (set CC)" >&2
else
  echo "note: could not install ${missing[*]}; tests that need them will skip and say why" >&2
fi
exit 0
