#!/bin/bash
# tierkv.h compiles as C11 and as C++17 (g++ -std=c++17 -Wall -Wextra -Werror
# -pedantic), lays out every public struct the same in both, and a C++ program
# links to libtierkv through the header's extern "C".
set -u
src=${TIERKV_SRC:?} lib=${TIERKV_LIB:?}
cc=${TIERKV_CC:-cc} san=${TIERKV_SAN_FLAGS:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# shellcheck disable=SC2086 # san: zero or more flags
build() { # out language compiler args...
	local out=$1 lang=$2
	shift 2
	if ! "$@" $san -Wall -Wextra -Werror -pedantic -I"$src/include" -x "$lang" "$src/tests/api_header.c" \
		-x none "$lib" -pthread -lm -o "$tmp/$out" 2>"$tmp/$out.err"; then
		echo "FAIL $out: $*"
		head -c 3000 "$tmp/$out.err"
		fail=1
		return 1
	fi
	"$tmp/$out" >"$tmp/$out.txt" || { echo "FAIL $out: exit $?"; fail=1; }
}
build c c "$cc" -std=c11
build cxx c++ g++ -std=c++17
if [ "$fail" = 0 ] && ! diff -u "$tmp/c.txt" "$tmp/cxx.txt"; then
	echo "FAIL the public structs differ between C and C++"
	fail=1
fi
[ "$fail" = 0 ] && echo "tierkv.h: C11 and C++17 agree on $(wc -l <"$tmp/c.txt") public structs"
exit "$fail"
