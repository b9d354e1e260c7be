"""`pip install ./python` works offline with Debian's setuptools and generates the stubs."""

import os
import shutil
import subprocess
import sys
import textwrap

import ipupod

SOURCE_ROOT = os.environ.get("IPUPOD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_installs_offline_into_a_virtual_environment(tmp_path):
    # A copy of the sources, so setuptools' build/ and egg-info stay out of the checkout.
    source = tmp_path / "src"
    shutil.copytree(os.path.join(SOURCE_ROOT, "python"), source / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    shutil.copytree(os.path.join(SOURCE_ROOT, "proto"), source / "proto")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not the build tree's
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
         str(source / "python")], capture_output=True, text=True, timeout=300, env=env,
        check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    check = textwrap.dedent("""
        import importlib.metadata, os, ipupod, ipupod.testing
        from ipupod._proto import pod_pb2_grpc, compile_pb2_grpc
        import ipupod.poptorch
        assert "site-packages" in ipupod.__file__, ipupod.__file__
        assert "site-packages" in ipupod.poptorch.__file__, ipupod.poptorch.__file__
        points = importlib.metadata.entry_points(group="pytest11")
        assert [p.value for p in points if p.name == "ipupod.testing"] == ["ipupod.testing"]
        print(ipupod.__version__, os.path.basename(pod_pb2_grpc.__file__))
    """)
    ran = subprocess.run([python, "-c", check], capture_output=True, text=True, timeout=60,
                         env=env, cwd=tmp_path, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [ipupod.__version__, "pod_pb2_grpc.py"]
    # the generated stubs went into the installed package, not into the sources
    assert not list((source / "python" / "ipupod" / "v1").glob("*_pb2*.py"))
