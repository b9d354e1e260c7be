"""docs/python.md's examples, run as they stand: the ```python blocks in order, in one
namespace, against a real ipupodd; the ```python pytest block as a user's test file."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import ipupod

SOURCE_ROOT = os.environ.get("IPUPOD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
FENCE = re.compile(r"^```python( pytest)?\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks():
    with open(os.path.join(SOURCE_ROOT, "docs", "python.md")) as file:
        text = file.read()
    return [(bool(match.group(1)), match.group(2)) for match in FENCE.finditer(text)]


def test_the_guide_has_examples():
    found = blocks()
    assert sum(1 for is_test, _ in found if not is_test) >= 6
    assert sum(1 for is_test, _ in found if is_test) == 1


@pytest.mark.ipupod(pod="POD4")
def test_the_guides_examples_run(ipupod_server, mlp, linear_mse, tmp_path, monkeypatch):
    shutil.copy(mlp.ipx, tmp_path / "mlp.ipx")
    shutil.copy(linear_mse.ipx, tmp_path / "mlp_train.ipx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "doc-reader")
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)
    namespace = {}
    for number, (is_test, code) in enumerate(blocks()):
        if is_test:
            continue
        try:
            exec(compile(code, f"docs/python.md block {number}", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"docs/python.md block {number} failed: {error!r}\n{code}")
    namespace["client"].close()


def test_the_guides_pytest_example_passes(tmp_path):
    [code] = [code for is_test, code in blocks() if is_test]
    (tmp_path / "test_guide.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ipupod.testing", "--strict-markers", "-q",
         "-p", "no:cacheprovider", "test_guide.py"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(ipupod.__file__))))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
