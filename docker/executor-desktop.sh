#!/bin/sh
# Starts a headless accessible desktop, then execs the executor given as "$@" (so it is PID 1's child
# replacement and receives SIGTERM directly). DISPLAY comes from the image (:99); UFO_DESKTOP_APPS lists
# the applications to open at start (default: mousepad).
set -eu
Xvfb "$DISPLAY" -screen 0 "${UFO_SCREEN:-1920x1080x24}" -nolisten tcp -noreset &
for _ in $(seq 1 100); do
  xdpyinfo -display "$DISPLAY" >/dev/null 2>&1 && break
  sleep 0.1
done
eval "$(dbus-launch --sh-syntax)"
export DBUS_SESSION_BUS_ADDRESS
export NO_AT_BRIDGE=0 GTK_A11Y=atspi
/usr/libexec/at-spi-bus-launcher --launch-immediately &
xfwm4 --compositor=off --sm-client-disable >/dev/null 2>&1 &
for app in ${UFO_DESKTOP_APPS:-mousepad}; do
  "$app" >/dev/null 2>&1 &
done
exec "$@"
