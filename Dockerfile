# syntax=docker/dockerfile:1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/agentworker ./cmd/agentworker

# The runtime has what run_command's sandbox needs (bubblewrap, Node.js,
# npm, prlimit, the CA certificates of the registry), pinned Debian
# packages; serve checks them at start and says whether commands are on.
# bubblewrap needs user namespaces: docker-compose.yml gives the services
# a seccomp profile that allows them (never privileged).
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      bubblewrap=0.8.0-2+deb12u1 \
      nodejs=18.20.4+dfsg-1~deb12u3 \
      npm=9.2.0~ds1-1 \
      util-linux=2.38.1-5+deb12u3 \
      ca-certificates=20250419~deb12u2 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin agentworker
COPY --from=build /out/agentworker /usr/local/bin/agentworker
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/agentworker"]
CMD ["serve"]
