# Multi-stage build of the UFO services. One builder compiles every binary once; each runtime stage is a
# slim Debian image with one service plus the `ufo` CLI (used by the health checks).
#   docker build -f docker/services.Dockerfile --target session .
#   docker build -f docker/services.Dockerfile --target agent .
# The Linux executor (which needs a desktop) has its own file: docker/executor.Dockerfile.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# The agent's OCR grounding links Tesseract (leptess; its bindings are generated with libclang).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libtesseract-dev libleptonica-dev libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# protoc comes from the protoc-bin-vendored build dependency: no system protobuf needed.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ufo-session --bin ufo-agent --bin ufo-executor --bin ufo \
 && mkdir -p /out \
 && cp target/release/ufo-session target/release/ufo-agent target/release/ufo-executor target/release/ufo /out/

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --create-home --home-dir /var/lib/ufo ufo
COPY --from=builder /out/ufo /usr/local/bin/ufo
USER ufo
WORKDIR /var/lib/ufo

FROM runtime AS session
COPY --from=builder /out/ufo-session /usr/local/bin/ufo-session
# The blob store of screenshots (docs/blob-store.md), owned by ufo so that a volume mounted here is too.
RUN mkdir -p /var/lib/ufo/blobs
EXPOSE 50053
ENTRYPOINT ["/usr/local/bin/ufo-session"]

FROM runtime AS agent
# Tesseract and its English data: the agent's OCR grounding (the agent loads them at start).
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends libtesseract5 tesseract-ocr-eng \
 && rm -rf /var/lib/apt/lists/*
USER ufo
COPY --from=builder /out/ufo-agent /usr/local/bin/ufo-agent
EXPOSE 8080 50052
ENTRYPOINT ["/usr/local/bin/ufo-agent"]
