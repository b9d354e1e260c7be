"""The package itself: generated stubs, the public API's documentation, the tensor codec."""

import inspect
import pydoc

import grpc
import numpy as np
import pytest

import ipupod
from ipupod import tensors
from ipupod._proto import execution_pb2, jobs_pb2, pod_pb2


def test_the_stubs_are_generated_from_the_proto_files():
    for module in (pod_pb2, execution_pb2, jobs_pb2):
        assert module.__name__.startswith("ipupod.v1.")
        assert module.DESCRIPTOR.package == "ipupod.v1"
    assert "SessionService" in pod_pb2.DESCRIPTOR.services_by_name
    assert "ExecutionService" in execution_pb2.DESCRIPTOR.services_by_name
    assert "JobService" in jobs_pb2.DESCRIPTOR.services_by_name


def test_help_on_the_client_documents_every_public_method():
    text = pydoc.render_doc(ipupod.Client, renderer=pydoc.plaintext)
    for name, member in inspect.getmembers(ipupod.Client, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert member.__doc__, name
        assert name in text
    assert "$IPUPOD_SERVER" in text and "attach" in text
    assert ipupod.__doc__ and "with client.attach" in ipupod.__doc__
    for cls in (ipupod.Session, ipupod.Error, ipupod.RecoverableError, ipupod.UnrecoverableError,
                ipupod.RunResult, ipupod.TrainResult):
        assert cls.__doc__, cls


def test_public_methods_have_type_hints():
    for cls in (ipupod.Client, ipupod.Session):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            hints = inspect.signature(member)
            assert hints.return_annotation is not inspect.Signature.empty, f"{cls.__name__}.{name}"


def roundtrip(arrays):
    messages = list(tensors.encode(arrays, lambda h: ("h", h), lambda d: ("d", d)))
    assembler = tensors.TensorAssembler("test", "here")
    for kind, value in messages:
        (assembler.add_header if kind == "h" else assembler.add_data)(value)
    return assembler.finish(), messages


def test_tensors_cross_the_wire_codec_unchanged():
    arrays = tensors.to_arrays({
        "f": np.arange(12, dtype=np.float32).reshape(3, 4),
        "big": np.arange(300_000, dtype=np.float32),  # > 1 MiB: several chunks
        "i64": np.array([[1, -2]], dtype=np.int64),
        "i32": np.array(7, dtype=np.int32),
        "half": np.array([1.5, -65504, 6e-8], dtype=np.float16),  # kept float16
        "b": np.array([True, False]),
        "empty": np.zeros((0, 5), np.float32),
        "wide": np.array([0.5], dtype=np.float64),  # narrowed to float32
        "big_endian": np.array([1.5, 2.5], dtype=">f4"),
    }, "test")
    back, messages = roundtrip(arrays)
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)
    assert back["wide"].dtype == np.float32 and back["big_endian"].dtype == np.dtype("<f4")
    assert max(len(v) for k, v in messages if k == "d") <= tensors.CHUNK_BYTES
    assert sum(1 for k, v in messages if k == "d") == 2 + 7  # big takes 2 chunks; empty none


def test_unsupported_dtypes_and_names_are_refused_locally():
    for bad in (np.zeros(2, np.uint8), np.zeros(2, np.int16), np.array(["a"])):
        with pytest.raises(ipupod.Error) as refused:
            tensors.to_arrays({"t": bad}, "here")
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "float32, float16, int64, int32, bool" in refused.value.message
    with pytest.raises(ipupod.Error):
        tensors.to_arrays({"x" * 257: np.zeros(1, np.float32)}, "here")
    with pytest.raises(ipupod.Error):
        tensors.to_arrays([np.zeros(1)], "here")


@pytest.mark.parametrize("stream,problem", [
    ([("d", b"x")], "data before any tensor header"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float64", shape=[1], total_bytes=8))],
     "unknown dtype"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float32", shape=[2], total_bytes=4))],
     "declares 4 bytes"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float32", shape=[-1], total_bytes=4))],
     "negative dim"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float32", shape=[1], total_bytes=4)),
      ("d", b"12345")], "more bytes than tensor 'a' declared"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float32", shape=[2], total_bytes=8)),
      ("d", b"1234")], "ended after 4 of 8 bytes"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="bool", shape=[1], total_bytes=1)),
      ("d", b"\x02")], "values other than 0 and 1"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="int32", shape=[], total_bytes=4)),
      ("d", b"1234"),
      ("h", execution_pb2.TensorHeader(name="a", dtype="int32", shape=[], total_bytes=4))],
     "sent twice"),
    ([("h", execution_pb2.TensorHeader(name="a", dtype="float32", shape=[1 << 31],
                                       total_bytes=8 << 30))], "declares"),
])
def test_a_malformed_stream_from_the_server_is_an_internal_error(stream, problem):
    assembler = tensors.TensorAssembler("outputs", "ExecutionService.Run at here")
    with pytest.raises(ipupod.Error) as bad:
        for kind, value in stream:
            (assembler.add_header if kind == "h" else assembler.add_data)(value)
        assembler.finish()
    assert bad.value.code == grpc.StatusCode.INTERNAL
    assert bad.value.message.startswith("ipupodd sent a malformed outputs stream: ")
    assert problem in bad.value.message


def _mixed_arrays():
    return tensors.to_arrays({
        "f": np.arange(12, dtype=np.float32).reshape(3, 4),
        "h": np.array([1.5, -2], dtype=np.float16),
        "b": np.array([True, False]),
        "s": np.array(7, dtype=np.int32),
        "e": np.zeros((0, 3), dtype=np.int64),
    }, "here")


def _inline_messages(arrays):
    return [execution_pb2.InlineTensor(header=tensors.header_of(name, array),
                                       data=array.tobytes()) for name, array in arrays.items()]


def test_inline_requests_are_the_bytes_protobuf_writes():
    cases = [
        ("s-1", _mixed_arrays()),
        ("", {"x": np.ones((1, 10), np.float32)}),  # proto3 writes no empty session
        ("a" * 300, {"large": np.ones((300, 200), np.float16)}),  # lengths of 2 and 3 bytes
        ("é", {"naïve": np.zeros((2,), np.int64)}),
        ("s-2", {}),
    ]
    for session, arrays in cases:
        want = execution_pb2.RunInlineRequest(session=session, inputs=_inline_messages(arrays))
        assert tensors.inline_request(session, arrays) == want.SerializeToString()
    # More headers than the cache holds: each request is still its own.
    for rows in range(1, 300):
        x = {"x": np.full((rows, 3), rows, np.float32)}
        parsed = execution_pb2.RunInlineRequest.FromString(tensors.inline_request("s", x))
        assert list(parsed.inputs[0].header.shape) == [rows, 3]
        assert parsed.inputs[0].data == x["x"].tobytes()


def test_inline_tensors_decode_as_the_stream_does():
    arrays = _mixed_arrays()
    decoded = tensors.decode_inline(_inline_messages(arrays), "outputs", "here")
    streamed, _ = roundtrip(arrays)
    assert list(decoded) == list(arrays)
    for name, array in arrays.items():
        assert decoded[name].dtype == array.dtype and decoded[name].shape == array.shape
        np.testing.assert_array_equal(decoded[name], array)
        np.testing.assert_array_equal(decoded[name], streamed[name])
        assert decoded[name].flags.writeable


def _inline(name, dtype, shape, total, data):
    header = execution_pb2.TensorHeader(name=name, dtype=dtype, shape=shape, total_bytes=total)
    return execution_pb2.InlineTensor(header=header, data=data)


@pytest.mark.parametrize("inline, problem", [
    ([_inline("a", "float32", [2], 8, b"1234")], "ended after 4 of 8 bytes"),
    ([_inline("a", "float32", [1], 4, b"12345")], "more bytes than tensor 'a' declared"),
    ([_inline("a", "float32", [2], 4, b"1234")], "declares 4 bytes"),
    ([_inline("a", "float64", [1], 8, b"12345678")], "unknown dtype"),
    ([_inline("a", "bool", [1], 1, b"\x02")], "values other than 0 and 1"),
    ([_inline("a", "int32", [], 4, b"1234")] * 2, "sent twice"),
    ([_inline("", "int32", [], 4, b"1234")], "a tensor name of 0 characters"),
])
def test_a_malformed_inline_tensor_is_an_internal_error(inline, problem):
    with pytest.raises(ipupod.Error) as bad:
        tensors.decode_inline(inline, "outputs", "ExecutionService.RunInline at here")
    assert bad.value.code == grpc.StatusCode.INTERNAL
    assert bad.value.message.startswith("ipupodd sent a malformed outputs stream: ")
    assert problem in bad.value.message


def test_arrays_the_wire_carries_as_they_are_pass_through_uncopied():
    x = np.ones((2, 3), np.float32)
    assert tensors.to_numpy("x", x, "here") is x
    swapped = x.astype(">f4")  # big-endian: converted, as before
    assert tensors.to_numpy("x", swapped, "here").dtype == np.dtype("<f4")
    strided = np.ones((4, 3), np.float32)[::2]
    assert tensors.to_numpy("x", strided, "here").flags.c_contiguous
    assert tensors.to_numpy("x", np.ones(2), "here").dtype == np.float32  # float64 narrowed
    assert tensors.wire_dtype_name(np.dtype(">i8")) == "int64"
    assert tensors.wire_dtype_name(np.dtype("complex64")) is None


def test_job_states_have_their_names():
    assert ipupod.JobState(jobs_pb2.COMPLETED) == ipupod.JobState.COMPLETED
    assert ipupod.JobState.COMPLETED.name == "COMPLETED"
    assert ipupod.FINISHED_STATES == {ipupod.JobState.COMPLETED, ipupod.JobState.FAILED,
                                      ipupod.JobState.CANCELLED, ipupod.JobState.TIMEOUT}


def test_upload_chunks_declare_once_and_a_file_that_shrinks_is_refused(tmp_path):
    data = bytes(range(256)) * (tensors.CHUNK_BYTES // 128)  # two chunks
    path = tmp_path / "blob"
    path.write_bytes(data + b"appended later")  # only the declared size is sent

    def shrunk(left):
        return ipupod.Error(f"{left} bytes left", type="test")

    for source in (dict(data=memoryview(data), path=None), dict(data=None, path=str(path))):
        messages = list(tensors.declared_chunks(jobs_pb2.BlobChunk, "ab" * 32, len(data),
                                                ended_early=shrunk, **source))
        assert [len(m.data) for m in messages] == [tensors.CHUNK_BYTES] * 2
        assert messages[0].sha256 == "ab" * 32 and messages[0].total_bytes == len(data)
        assert not messages[1].sha256 and not messages[1].total_bytes
        assert b"".join(m.data for m in messages) == data
    path.write_bytes(data[:100])
    with pytest.raises(ipupod.Error, match=f"{len(data) - 100} bytes left"):
        list(tensors.declared_chunks(execution_pb2.ExecutableChunk, "ab" * 32, len(data), None,
                                     str(path), shrunk))
