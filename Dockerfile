# meshpush's container images, both from one build:
# - the control plane (the default target): the release binary on a
#   distroless base, as a non-root user;
# - `proxy`: what an injected pod's istio-init and istio-proxy containers
#   run, as Istio's proxyv2 image: meshpush (`meshpush iptables`,
#   `meshpush agent`, `meshpush wait`), Envoy 1.40, and Debian's
#   iptables (legacy and nft), with Istio's proxy user (uid and gid 1337).
# No container registry is reachable where meshpush is developed, so CI
# cannot build these images; they are kept minimal so that what CI tests
# (the same binary, Envoy 1.40, Debian's iptables) is what runs in them.
#
#   docker build -t meshpush:0.1.0 .
#   docker build --target proxy -t meshpush-proxy:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin meshpush \
    && cp target/release/meshpush /meshpush

FROM envoyproxy/envoy:v1.40-latest AS envoy

FROM debian:bookworm-slim AS proxy
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables iproute2 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 1337 istio-proxy \
    && useradd --uid 1337 --gid 1337 --no-create-home --shell /usr/sbin/nologin istio-proxy
COPY --from=envoy /usr/local/bin/envoy /usr/local/bin/envoy
COPY --from=build /meshpush /usr/local/bin/meshpush
WORKDIR /
USER 1337:1337
ENTRYPOINT ["/usr/local/bin/meshpush"]
CMD ["agent", "--help"]

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /meshpush /usr/local/bin/meshpush
USER nonroot:nonroot
EXPOSE 15010 15012 15014 15017
ENTRYPOINT ["/usr/local/bin/meshpush"]
CMD ["serve", "--in-cluster", "--xds-addr=0.0.0.0:15010", "--admin-addr=0.0.0.0:15014"]
