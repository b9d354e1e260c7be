#!/usr/bin/env bash
# Installs every Debian 12 package ipupod needs to build, test and run.
# Idempotent: packages already present are skipped, and apt is only called
# when something is missing. Must run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ninja-build clang clang-format ccache
  libclang-rt-14-dev  # clang's sanitizer and libFuzzer runtimes (only recommended by clang)
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libabsl-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev
  libopenblas-dev
  libimath-dev  # IEEE float16 conversions (common/tensor/float16.h), as OpenEXR uses them
  libdnnl-dev  # oneDNN: convolutions and pooling (device/kernels/conv.h), the library torch uses on CPU
  librandom123-dev  # Philox, the counter-based generator of training-mode Dropout (device/graph/run_context.h)
  ocl-icd-opencl-dev  # only because Debian's oneDNN CMake package asks for OpenCL (its GPU runtime)
  libgtest-dev libgmock-dev libbenchmark-dev
  libonnx-dev
  libcli11-dev
  libsqlite3-dev zlib1g-dev
  libsystemd-dev  # sd_notify: the Type=notify unit knows when ipupodd serves (server/service_manager.h)
  systemd  # systemd-analyze: CI verifies the installed unit (tests/deploy/test_install.py)
  file  # CPack's DEB generator reads each binary with it (deploy/package.sh; not on a minimal install)
  dpkg-dev  # dpkg-shlibdeps: the .deb's Depends from the libraries it links (cmake/install.cmake)
  libssl-dev  # OpenSSL: TLS certificates and keys checked before gRPC uses them (common/tls/pem.h)
  openssl  # the TLS tests make their certificates with it (tests/support/make_test_certificates.sh)
  python3 python3-torch python3-onnx python3-numpy
  python3-torchvision  # parity of the convolutional models (tests/parity)
  # the Python client (python/): its runtime, its tests, and the offline `pip install ./python`
  python3-grpcio python3-protobuf python3-pytest python3-setuptools python3-pip
  python3-pyflakes  # stage 0's Python check (tools/check_python.py)
  # metrics (docs/operations.md): prometheus-cpp's registry and text format (its core only;
  # Debian's package pulls in civetweb for its Exposer, which nothing of ours links)
  prometheus-cpp-dev
  # the HTTP listener (server/http/): GNU libmicrohttpd, an epoll loop on a small thread pool, so a
  # silent client costs a socket and not a thread, and HTTPS through GnuTLS (libgnutls28-dev,
  # its dependency) with the certificate and key from memory; civetweb, its predecessor,
  # crashes on HTTPS with OpenSSL 3 and serves a thread per connection (docs/design.md)
  libmicrohttpd-dev
  # their tests: libcurl scrapes, the openssl CLI makes certificates, a real Prometheus
  # scrapes a test server (tests/integration/prometheus_test.cc)
  libcurl4-openssl-dev openssl prometheus
  # the status page's test loads it in a real browser, headless (tests/integration/browser.h)
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
