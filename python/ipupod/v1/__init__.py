"""The generated gRPC stubs of the ipupod.v1 wire contract (proto/ipupod/v1/*.proto).

The build writes ``pod_pb2.py``, ``execution_pb2.py``, ``jobs_pb2.py`` and their ``*_pb2_grpc.py``
here (CMake: python/CMakeLists.txt; pip: python/setup.py); they are never checked in. The
include root is proto/, so the generated ``from ipupod.v1 import pod_pb2`` resolves inside
this package.
"""
