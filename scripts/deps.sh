#!/bin/bash
# Installs what tierkv needs to build and test on Debian 12, if it is missing.
set -eu
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v cmake >/dev/null || need+=(cmake)
# the public API's tests: tierkv.h as C++17, examples/ built with tierkv.pc
command -v g++ >/dev/null || need+=(g++)
command -v pkg-config >/dev/null || need+=(pkgconf)
[ -f /usr/include/cmocka.h ] || need+=(libcmocka-dev)
# tierkv serve: HTTP server and JSON libraries; curl for its tests
[ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
command -v curl >/dev/null || need+=(curl)
# tierkv serve --kv-store: hiredis; its loopback test (tests/cli_kvstore.sh,
# deploy/local.sh): redis-server, haproxy, python3
[ -f /usr/include/hiredis/hiredis.h ] || need+=(libhiredis-dev)
command -v redis-server >/dev/null || need+=(redis-server)
command -v haproxy >/dev/null || need+=(haproxy)
command -v python3 >/dev/null || need+=(python3)
# the web page's browser test (tests/cli_web.sh): headless Chromium and its
# WebDriver
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# the libFuzzer targets (scripts/fuzz.sh, the fuzz smoke of scripts/test.sh):
# clang and its fuzzer runtime
if [ "${TKV_FUZZ_DEPS:-0}" = 1 ]; then
	command -v clang >/dev/null || need+=(clang)
	ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
fi
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "installing: ${need[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}"
