# The taint-operator image: the one static binary and nothing else (no shell, no
# package manager), run as a numeric non-root user. Its root filesystem can be
# mounted read-only: the operator writes no file.
#
# No base image is pulled: the binary needs no shared library, so the image starts
# FROM scratch and the build context must hold the binary already, staged with its
# kubectl plugin name (a symlink: `kubectl taintpolicy` runs the same binary):
#
#   RUSTFLAGS="-C target-feature=+crt-static" \
#     cargo build --release --locked --target x86_64-unknown-linux-gnu -p taint-operator
#   mkdir -p target/image-root/usr/local/bin
#   cp target/x86_64-unknown-linux-gnu/release/taint-operator target/image-root/usr/local/bin/
#   ln -sf taint-operator target/image-root/usr/local/bin/kubectl-taintpolicy
#
# then `docker build .`, `podman build .` or `buildah bud .` from the repository
# root (`just image` does all of it with buildah and writes a docker-archive).
FROM scratch
# A directory is copied with its symlinks kept, so the plugin name costs no bytes.
COPY target/image-root/ /
# Statically linked glibc reads no /etc/nsswitch.conf and loads no resolver module:
# in a cluster the API server is reached by IP (KUBERNETES_SERVICE_HOST).
ENV PATH=/usr/local/bin
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/taint-operator"]
CMD ["--help"]
