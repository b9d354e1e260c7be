"""Builds the ipupod package with its gRPC stubs generated from ../proto (pyproject.toml).

The stubs are generated into the build directory, never into the source tree: protoc runs
with the proto folder as its include root, so proto/ipupod/v1/pod.proto becomes
ipupod/v1/pod_pb2.py inside the package and its generated imports (`from ipupod.v1 import
pod_pb2`) resolve as they are - the layout python/CMakeLists.txt gives build/python.

$IPUPOD_PROTO_DIR overrides where the .proto files are (default ../proto); $PROTOC and
$GRPC_PYTHON_PLUGIN override the tools (default: protoc and grpc_python_plugin on PATH).
"""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _tool(variable, name, package):
    path = os.environ.get(variable) or shutil.which(name)
    if not path:
        raise SystemExit(f"ipupod: cannot build the gRPC stubs: {name} not found (Debian: "
                         f"apt-get install {package}; or set ${variable})")
    return path


def generate_stubs(out_dir):
    proto_root = os.environ.get("IPUPOD_PROTO_DIR") or os.path.join(HERE, "..", "proto")
    protos = sorted(glob.glob(os.path.join(proto_root, "ipupod", "v1", "*.proto")))
    if not protos:
        raise SystemExit(f"ipupod: no .proto files under {proto_root}/ipupod/v1; build from the "
                         f"repository (pip install ./python) or set $IPUPOD_PROTO_DIR")
    protoc = _tool("PROTOC", "protoc", "protobuf-compiler")
    plugin = _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "protobuf-compiler-grpc")
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, f"--proto_path={proto_root}", f"--python_out={out_dir}",
                    f"--grpc_python_out={out_dir}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", *protos], check=True)


class BuildPyWithStubs(build_py):
    """build_py, then the stubs beside the package in the build directory."""

    def run(self):
        super().run()
        generate_stubs(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
