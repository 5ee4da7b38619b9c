# meshpush's container image: built with the Rust toolchain, run from a
# distroless base as a non-root user. No container registry is reachable
# where meshpush is developed, so CI cannot build this image; it is kept
# minimal (the release binary and nothing else) so that what CI tests is
# what runs in it.
#
#   docker build -t meshpush:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin meshpush \
    && cp target/release/meshpush /meshpush

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /meshpush /usr/local/bin/meshpush
USER nonroot:nonroot
EXPOSE 15010 15014
ENTRYPOINT ["/usr/local/bin/meshpush"]
CMD ["serve", "--in-cluster", "--xds-addr=0.0.0.0:15010", "--admin-addr=0.0.0.0:15014"]
