# syntax=docker/dockerfile:1
# The base images are build arguments so that stand-ins made from Debian's
# archive and the Go module proxy can replace them where no image registry
# answers (scripts/container makes them); the defaults are the registry's.
ARG GO_IMAGE=golang:1.26-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
# Go's module and build caches live in cache mounts, kept by the builder
# between builds: only the first build compiles every dependency.
ENV GOMODCACHE=/root/go-cache/mod GOCACHE=/root/go-cache/build CGO_ENABLED=0 GOFLAGS=-buildvcs=false
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,id=agentworker-gomod,target=/root/go-cache/mod \
    go mod download
COPY . .
RUN --mount=type=cache,id=agentworker-gomod,target=/root/go-cache/mod \
    --mount=type=cache,id=agentworker-gobuild,target=/root/go-cache/build \
    go build -trimpath -ldflags="-s -w" -o /out/agentworker ./cmd/agentworker

# The runtime has what run_command's sandbox needs (bubblewrap, Node.js,
# npm, prlimit, the CA certificates of the registry), pinned Debian
# packages; serve checks them at start and says whether commands are on.
# bubblewrap needs user namespaces: docker-compose.yml gives the services
# a seccomp profile that allows them (never privileged). tini is PID 1: it
# reaps the sandbox's orphaned processes and passes signals on.
FROM ${DEBIAN_IMAGE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      bubblewrap=0.8.0-2+deb12u1 \
      nodejs=18.20.4+dfsg-1~deb12u3 \
      npm=9.2.0~ds1-1 \
      util-linux=2.38.1-5+deb12u3 \
      ca-certificates=20250419~deb12u2 \
      tini=0.19.0-1+b3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin agentworker
COPY --from=build /out/agentworker /usr/local/bin/agentworker
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/agentworker"]
CMD ["serve"]
