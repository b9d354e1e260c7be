"""The generated stubs, imported in one place with a clear error when they are missing."""

try:
    from ipupod.v1 import accounting_pb2, accounting_pb2_grpc  # noqa: F401
    from ipupod.v1 import audit_pb2, audit_pb2_grpc  # noqa: F401
    from ipupod.v1 import compile_pb2, compile_pb2_grpc  # noqa: F401
    from ipupod.v1 import execution_pb2, execution_pb2_grpc  # noqa: F401
    from ipupod.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: F401
    from ipupod.v1 import pod_pb2, pod_pb2_grpc  # noqa: F401
except ImportError as error:  # pragma: no cover - a broken installation
    raise ImportError(
        f"the ipupod package has no generated gRPC stubs ({error}); build them with "
        "`bash deploy/build.sh` and use PYTHONPATH=build/python, or install the package with "
        "`pip install --no-build-isolation ./python` (needs protoc and grpc_python_plugin: "
        "Debian's protobuf-compiler and protobuf-compiler-grpc)") from error

__all__ = ["accounting_pb2", "accounting_pb2_grpc", "audit_pb2", "audit_pb2_grpc", "compile_pb2",
           "compile_pb2_grpc", "execution_pb2", "execution_pb2_grpc", "jobs_pb2", "jobs_pb2_grpc",
           "pod_pb2", "pod_pb2_grpc"]
