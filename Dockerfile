# bagua's image: `docker run --rm -v "$PWD:/work" IMAGE run recipe.yaml`.
# docs/docker.md says how to build it, what it holds and how to use it in a
# CI pipeline; scripts/docker-test.sh builds and tests it.
#
# Two stages that matter. `build` has the -dev packages and compiles libbagua and the
# bagua command (BAGUA_TESTS=ON also builds and runs the test suite there);
# `runtime` has only what running needs: LibTorch's shared libraries,
# OpenBLAS, redis-server, iproute2, the Fashion-MNIST data, and the install
# tree (bin/bagua, lib/libbagua.so with its headers and CMake package,
# share/bagua/ with the schema and the example recipes and models).
#
# When the build is given a compiler cache at /ccache (podman build
# --volume DIR:/ccache, or BuildKit's cache mount), compiling reuses it:
# scripts/docker-test.sh passes the one scripts/build.sh fills, and the
# checkout's path as BAGUA_SRC, so objects already compiled on the host are
# not compiled again.

ARG BASE=debian:bookworm-slim

# The packages of each stage come first, in stages of their own that
# change only with install-deps.sh, so a rebuild reuses them (and
# scripts/docker-test.sh builds them while the host compiles).
FROM ${BASE} AS build-deps
ARG BAGUA_TESTS=OFF
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN if [ "$BAGUA_TESTS" = ON ]; then bash /tmp/install-deps.sh; else bash /tmp/install-deps.sh --build; fi \
 && rm -rf /tmp/install-deps.sh /var/lib/apt/lists/*

FROM ${BASE} AS runtime-deps
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /tmp/install-deps.sh /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --create-home --uid 1000 --shell /bin/bash bagua \
 && mkdir -p /work && chown bagua:bagua /work

FROM build-deps AS build
ARG BAGUA_TESTS=OFF
# Where the sources are built. The unity build's batch files include each
# source by its absolute path, so a compiler cache filled by a checkout
# elsewhere hits only when the path is the same: scripts/docker-test.sh
# passes its own. The sources are always copied to /src and moved inside the
# RUN: a WORKDIR or COPY naming ${BAGUA_SRC} is cached by podman on its text,
# not the argument's value, so a layer cache made with another path gave an
# empty build directory (issue 26). Whatever path, the result is the same.
ARG BAGUA_SRC=/src
COPY . /src
RUN set -e; \
    if [ "$BAGUA_SRC" != /src ]; then \
      mkdir -p "$(dirname "$BAGUA_SRC")"; rm -rf "$BAGUA_SRC"; mv /src "$BAGUA_SRC"; \
    fi; \
    cd "$BAGUA_SRC"; \
    if [ -d /ccache ]; then export CCACHE_DIR=/ccache; fi; \
    BAGUA_CCACHE_STATS=1 bash scripts/build.sh -DBAGUA_BUILD_TESTS=$BAGUA_TESTS -DBAGUA_BUILD_BENCH=OFF \
      -DCMAKE_INSTALL_PREFIX=/opt/bagua; \
    if [ "$BAGUA_TESTS" = ON ]; then ctest --test-dir build --output-on-failure -j "$(nproc)"; fi; \
    cmake --install build > /dev/null

FROM runtime-deps AS runtime
COPY --from=build /opt/bagua /usr/local
USER bagua
WORKDIR /work
ENTRYPOINT ["bagua"]
CMD ["--help"]
