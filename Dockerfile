# syntax=docker/dockerfile:1
# leasehold: a static binary on a distroless base, running as a non-root user.
#
#   docker build -t leasehold --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --network host -v leasehold-data:/data leasehold
#
# As shipped it serves the API on 127.0.0.1:7420 (no TLS needed on
# loopback). To serve other hosts, mount certificates and set, for example,
#   -e LEASEHOLD_LISTEN=0.0.0.0:7420 -e LEASEHOLD_CERT=/certs/tls.crt -e LEASEHOLD_KEY=/certs/tls.key
# (README: Deploy). Raft peers talk on 7520 (a cluster: LEASEHOLD_RAFT_ADDR,
# LEASEHOLD_BOOTSTRAP, LEASEHOLD_JOIN). scripts/image.sh builds the same
# image without a registry (deploy/container/Dockerfile, an empty base).

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
# --- runtime: the same in both Dockerfiles
USER 65532:65532
# Every serve flag has an environment variable; the defaults keep the API
# on loopback (no TLS needed). To serve other hosts, mount certificates and
# set LEASEHOLD_LISTEN=0.0.0.0:7420 LEASEHOLD_CERT=/certs/tls.crt
# LEASEHOLD_KEY=/certs/tls.key (README: Deploy).
ENV LEASEHOLD_DATA=/data LEASEHOLD_LISTEN=127.0.0.1:7420
EXPOSE 7420 7520
VOLUME /data
STOPSIGNAL SIGTERM
ENTRYPOINT ["/leasehold"]
CMD ["serve"]
