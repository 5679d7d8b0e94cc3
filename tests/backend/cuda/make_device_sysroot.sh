#!/bin/sh
# Packs what the device machine lacks to build and run twofold with TF_CUDA=ON: PCRE2, ICU
# (icu-uc), xxHash and cpp-httplib (headers, shared libraries, relocatable .pc files; for
# httplib also the OpenSSL, zlib and Brotli headers its API needs, and the Brotli libraries)
# and pkgconf, taken from this Debian 12 machine's installed packages (libpcre2-dev,
# libicu-dev, libxxhash-dev, libcpp-httplib-dev, pkgconf). Writes $1 (default build-cuda-sysroot/sysroot.tar.xz, ~9 MB: the tree travels
# with every device call and must stay under 64 MiB in all).
#
# On the device:
#   mkdir -p /tmp/sysroot && tar -C /tmp/sysroot -xJf build-cuda-sysroot/sysroot.tar.xz
#   export PKG_CONFIG_PATH=/tmp/sysroot/lib/pkgconfig LD_LIBRARY_PATH=/tmp/sysroot/lib
#   cmake ... -DPKG_CONFIG_EXECUTABLE=/tmp/sysroot/bin/pkg-config
set -eu
out=${1:-build-cuda-sysroot/sysroot.tar.xz}
L=/usr/lib/x86_64-linux-gnu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib/pkgconfig" "$tmp/include" "$tmp/bin"
cp -a $L/libicuuc.so* $L/libicudata.so* $L/libpcre2-8.so* $L/libxxhash.so* $L/libpkgconf.so* "$tmp/lib/"
cp -a $L/libcpp-httplib.so* $L/libbrotlicommon.so* $L/libbrotlidec.so* $L/libbrotlienc.so* "$tmp/lib/"
cp -a /usr/include/unicode /usr/include/openssl /usr/include/brotli "$tmp/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$tmp/include/openssl/"
cp /usr/include/pcre2.h /usr/include/xxhash.h /usr/include/xxh3.h /usr/include/httplib.h /usr/include/zlib.h \
   /usr/include/zconf.h "$tmp/include/"
# pkgconf finds libpkgconf next to it through LD_LIBRARY_PATH
cp /usr/bin/pkgconf "$tmp/bin/pkg-config"
# .pc files relative to their own directory, so the tree can be unpacked anywhere
httplib_defs="-DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT"
for spec in "icu-uc:72.1:-licuuc -licudata:" "libpcre2-8:10.42:-lpcre2-8:" "libxxhash:0.8.1:-lxxhash:" \
            "cpp-httplib:0.11.4:-lcpp-httplib:$httplib_defs"; do
  name=${spec%%:*}; rest=${spec#*:}; version=${rest%%:*}; rest=${rest#*:}; libs=${rest%%:*}; defs=${rest#*:}
  cat > "$tmp/lib/pkgconfig/$name.pc" <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: $name
Description: $name (packed from Debian 12 for the device)
Version: $version
Libs: -L\${libdir} $libs
Cflags: -I\${includedir} $defs
PC
done
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cJf "$out" .
ls -l "$out"
