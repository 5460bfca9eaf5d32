#!/bin/sh
# Assembles the container image's root filesystem in DIR from a tidebus BINARY: the binary
# (stripped, allowed to bind ports below 1024 as a plain user, for WebSockets on 80 and 443),
# the shared libraries `ldd` lists for it, a `tidebus` user (10001) and its store /data.
# Used by the Containerfile's build stage and by build.sh. Usage: rootfs.sh BINARY DIR
set -eu
binary=$1
root=$2
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/data" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$binary" "$root/usr/local/bin/tidebus"
strip "$root/usr/local/bin/tidebus" 2>/dev/null || echo "rootfs.sh: strip not found; the binary keeps its symbols" >&2
# Every shared object the binary loads, the dynamic loader included, at its own path.
for library in $(ldd "$binary" | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$library")"
  cp -L "$library" "$root$library"
done
echo 'tidebus:x:10001:10001:tidebus:/data:/sbin/nologin' > "$root/etc/passwd"
echo 'tidebus:x:10001:' > "$root/etc/group"
if ! chown 10001:10001 "$root/data" 2>/dev/null; then
  echo "rootfs.sh: cannot chown /data (not root): mount a volume the user 10001 may write" >&2
fi
if ! setcap cap_net_bind_service=+ep "$root/usr/local/bin/tidebus" 2>/dev/null; then
  echo "rootfs.sh: setcap failed (libcap2-bin, root): ports 80 and 443 then need" \
    "--sysctl net.ipv4.ip_unprivileged_port_start=0" >&2
fi
