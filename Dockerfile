# rkube's one image: every rkube binary (and, for the etcd compose profile, Debian's etcd) on
# an empty base.
#
# This machine's Docker engine cannot pull images, so the image is built FROM scratch out of a
# root filesystem assembled locally by scripts/image.sh (the binaries plus the shared libraries
# they link, found with ldd):
#
#   ./scripts/image.sh            # builds target/image-root and `docker build`s rkube:latest
#
# Where pulling works, the usual multi-stage build does the same:
#
#   FROM rust:1-bookworm AS build
#   WORKDIR /src
#   COPY . .
#   RUN cargo build --release --bins
#   FROM debian:bookworm-slim
#   RUN apt-get update && apt-get install -y --no-install-recommends etcd-server && rm -rf /var/lib/apt/lists/*
#   COPY --from=build /src/target/release/rkube-* /usr/local/bin/
FROM scratch
COPY . /
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 0
