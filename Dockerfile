# syntax=docker/dockerfile:1
# Two images from one build: the manager (default; it also holds /gateway, the
# agentrun-gateway binary config/gateway runs, and /agentrun-tools, the
# reference MCP tool server config/tools runs) and the reference research
# agent (--target research-agent). Both are static, run as non-root on a
# distroless base, and suit the restricted Pod Security Standard (read-only
# root filesystem; the agent writes only under /tmp).
#
#   docker build -t agentrun:dev .
#   docker build --target research-agent -t research-agent:dev .
#
# Override BASE_IMAGE to build from another registry, e.g. docker.io/library/golang:1.26
ARG BASE_IMAGE=golang:1.26
FROM ${BASE_IMAGE} AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Module manifests first, so source changes don't invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download

# The Go source (.dockerignore keeps out everything else).
COPY . .

# GOARCH has no default so the binary matches the platform docker builds for.
ENV CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH}
RUN go build -trimpath -ldflags="-s -w" -o manager ./cmd \
 && go build -trimpath -ldflags="-s -w" -o gateway ./cmd/gateway \
 && go build -trimpath -ldflags="-s -w" -o agentrun-tools ./cmd/agentrun-tools \
 && go build -trimpath -ldflags="-s -w" -o agentrun-stream ./cmd/agentrun-stream \
 && go build -trimpath -ldflags="-s -w" -o research-agent ./cmd/research-agent

FROM gcr.io/distroless/static:nonroot AS research-agent
WORKDIR /
COPY --from=builder /workspace/research-agent /research-agent
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/research-agent"]

# The manager is the last stage, so a plain `docker build` produces it.
FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=builder /workspace/manager /manager
COPY --from=builder /workspace/gateway /gateway
COPY --from=builder /workspace/agentrun-tools /agentrun-tools
COPY --from=builder /workspace/agentrun-stream /agentrun-stream
USER 65532:65532
ENTRYPOINT ["/manager"]
