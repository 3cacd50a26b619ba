# The Linux executor in a container with its own desktop: Xvfb, a session D-Bus with the AT-SPI registry
# (the accessibility API the executor reads and acts through), the xfwm4 window manager, and GTK
# applications to drive (mousepad, gtk3-widget-factory). docker/executor-desktop.sh starts them, then
# execs ufo-executor so it receives the container's SIGTERM.
#   docker build -f docker/executor.Dockerfile .

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ufo-executor --bin ufo \
 && mkdir -p /out \
 && cp target/release/ufo-executor target/release/ufo /out/

FROM debian:bookworm-slim AS executor
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates xvfb x11-utils dbus dbus-x11 at-spi2-core xfwm4 \
      gtk-3-examples mousepad fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --create-home --home-dir /home/ufo ufo
COPY --from=builder /out/ufo-executor /usr/local/bin/ufo-executor
COPY --from=builder /out/ufo /usr/local/bin/ufo
COPY docker/executor-desktop.sh /usr/local/bin/executor-desktop.sh
USER ufo
WORKDIR /home/ufo
ENV DISPLAY=:99
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/executor-desktop.sh", "/usr/local/bin/ufo-executor"]
