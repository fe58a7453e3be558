# syntax=docker/dockerfile:1
# leasehold: a static binary on a distroless base, running as a non-root user.
#
#   docker build -t leasehold --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run -p 7420:7420 -v leasehold-data:/data leasehold
#
# The API, metrics, probes and the dashboard (/ui) are on port 7420; Raft
# peers talk on 7520 (in a cluster: add --raft-addr, --bootstrap or --join).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/leasehold/leasehold/internal/buildinfo.version=${VERSION} -X github.com/leasehold/leasehold/internal/buildinfo.commit=${COMMIT}" \
      -o /out/leasehold ./cmd/leasehold \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/leasehold /leasehold
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 7420 7520
VOLUME /data
ENTRYPOINT ["/leasehold"]
CMD ["serve", "--listen", "0.0.0.0:7420", "--data", "/data"]
