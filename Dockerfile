# syntax=docker/dockerfile:1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/agentworker ./cmd/agentworker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/agentworker /usr/local/bin/agentworker
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/agentworker"]
CMD ["serve"]
