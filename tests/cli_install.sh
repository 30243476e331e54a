#!/usr/bin/env bash
# Loom as a library: `cmake --install` into a temporary prefix, then the
# README's C example (extracted from README.md, so the example shown is the
# one tested) built against the installed files three ways — pkg-config
# with the shared library, pkg-config --static, and a CMake project with
# find_package(Loom) — and run. Usage: cli_install.sh LOOM_BINARY DATA_DIR
LOOM=$1
source "$(dirname "$0")/lib/cli_harness.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(dirname "$LOOM")
prefix=$tmp/prefix
cc=${CC:-cc}
# a sanitized build's libraries need the consumer built the same way
flags=()
[[ ${LOOM_SANITIZE:-0} == 1 ]] && flags=(-fsanitize=address,undefined)

out=$(cmake --install "$build" --prefix "$prefix" 2>&1)
rc=$?
expect "cmake --install" 0
for f in include/loom.h lib/libloom.a lib/libloom.so lib/pkgconfig/loom.pc \
  lib/cmake/Loom/LoomConfig.cmake lib/cmake/Loom/LoomConfigVersion.cmake bin/loom; do
  [[ -e $prefix/$f ]] && ok || bad "installed $f"
done
# the soname carries the ABI version
soname=$(objdump -p "$prefix/lib/libloom.so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
[[ $soname == libloom.so.0.1 ]] && ok || bad "soname is libloom.so.0.1, not '$soname'"
# the shared library exports the public API and nothing else
exported=$(nm -D --defined-only "$prefix/lib/libloom.so" | awk '{ print $3 }' | grep -vc '^loom_')
[[ $exported == 0 ]] && ok || bad "libloom.so exports $exported names outside loom_*"
nm -D --defined-only "$prefix/lib/libloom.so" | grep -q ' loom_session_run$' && ok ||
  bad "libloom.so exports loom_session_run"

# the README's example, as the README shows it
awk '/^```c$/ { on = 1; next } /^```$/ { on = 0 } on' "$src/README.md" >"$tmp/example.c"
grep -q loom_session_run "$tmp/example.c" && ok || bad "README.md has the C example"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
want="y = [[4, 1], [10, 1]]"

# shared, through pkg-config; the installed library, not the build tree's
read -r -a pc <<<"$(pkg-config --cflags --libs loom)"
out=$($cc -std=c11 "${flags[@]}" "$tmp/example.c" "${pc[@]}" -o "$tmp/ex_shared" 2>&1)
rc=$?
expect "pkg-config: builds against libloom.so" 0
out=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/ex_shared" 2>&1)
rc=$?
expect "pkg-config: the shared example runs" 0 "$want"
LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/ex_shared" 2>/dev/null | grep -q "$prefix/lib/libloom.so.0.1" && ok ||
  bad "the example loads the installed libloom.so"

# static, through pkg-config --static: the archive named, then what it needs
read -r -a pc <<<"$(pkg-config --static --cflags --libs loom)"
deps=()
for a in "${pc[@]}"; do [[ $a == -lloom ]] || deps+=("$a"); done
out=$($cc -std=c11 "${flags[@]}" "$tmp/example.c" "$prefix/lib/libloom.a" "${deps[@]}" \
  -o "$tmp/ex_static" 2>&1)
rc=$?
expect "pkg-config --static: builds against libloom.a" 0
out=$("$tmp/ex_static" 2>&1)
rc=$?
expect "pkg-config --static: the example runs" 0 "$want"

# a CMake project with find_package(Loom)
mkdir -p "$tmp/consumer" && cp "$src/tests/install/CMakeLists.txt" "$tmp/example.c" "$tmp/consumer/"
out=$(cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="${flags[*]}" 2>&1 && cmake --build "$tmp/consumer/build" 2>&1)
rc=$?
expect "find_package(Loom): the consumer builds" 0
for ex in example_shared example_static; do
  out=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/consumer/build/$ex" 2>&1)
  rc=$?
  expect "find_package(Loom): $ex runs" 0 "$want"
done
finish cli_install
