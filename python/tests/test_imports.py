"""Every module of the package imports alone, each in a fresh /usr/bin/python3.

``import ipupod.X`` always runs ipupod/__init__.py first, and it imports ipupod.client and
through it nearly every module, in one fixed order; ``import ipupod.poptorch.X`` runs
ipupod/poptorch/__init__.py too. So a cycle that breaks only when the import starts at X
(X half-initialised when a module it imports imports it back) would stay hidden behind the
package's own order. Each module is therefore imported twice, each time in its own
interpreter:

* as users do: ``/usr/bin/python3 -c "import ipupod.X"``;
* alone: the packages above X (``ipupod``, ``ipupod.poptorch``) are stand-ins whose
  ``__init__`` runs only when one of its own names is asked for (``from ipupod import
  __version__``), so X's imports run in X's order, and afterwards only modules of X's layer
  and below may be loaded (the layers of tools/check_python.py, which checks the same
  statically in CI's stage 0).

Registered in CTest as ``python_test_imports``, label ``unit`` (python/CMakeLists.txt): it
needs the built package (``build/python``, with the generated stubs) but no server.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Tuple

import pytest

SOURCE_DIR = os.environ.get("IPUPOD_SOURCE_DIR",
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import check_python  # noqa: E402

PYTHON = "/usr/bin/python3"

# Runs in the fresh interpreter: stand-ins for the packages above sys.argv[1], the import,
# then the ipupod modules loaded (a stand-in counts once its real __init__ ran), as JSON.
ALONE = r"""
import importlib, importlib.util, json, sys

def stand_in(name):
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    state = {"loading": False, "loaded": False}

    def missing(attribute):
        # Submodules are for the import system to load; anything else is the package's own
        # name: run the real __init__ (once), then look again.
        if (state["loading"] or state["loaded"]
                or importlib.util.find_spec(f"{name}.{attribute}") is not None):
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        state["loading"] = True
        spec.loader.exec_module(module)
        state["loaded"] = True
        return getattr(module, attribute)

    module.__getattr__ = missing
    module.__stand_in__ = state
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)

target = sys.argv[1]
parts = target.split(".")
for end in range(1, len(parts)):
    stand_in(".".join(parts[:end]))
importlib.import_module(target)
loaded = [name for name, module in sys.modules.items()
          if (name == "ipupod" or name.startswith("ipupod."))
          and module.__dict__.get("__stand_in__", {"loaded": True})["loaded"]]
print(json.dumps(sorted(loaded)))
"""


def package_modules() -> List[str]:
    """Every module of the package on the path (build/python: the sources and the stubs)."""
    spec = importlib.util.find_spec("ipupod")
    assert spec is not None and spec.submodule_search_locations, "ipupod is not on the path"
    root = list(spec.submodule_search_locations)[0]
    return sorted(check_python.modules_of(root))


MODULES = package_modules()


def run(code: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, *code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), cwd="/")


@pytest.fixture(scope="module")
def imports() -> Dict[Tuple[str, str], subprocess.CompletedProcess]:
    """(way, module) -> the finished interpreter of each import, run side by side."""
    jobs = {}
    for module in MODULES:
        jobs[("as users do", module)] = ["-c", f"import {module}"]
        jobs[("alone", module)] = ["-c", ALONE, module]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = dict(zip(jobs, pool.map(run, jobs.values())))
    return results


def test_the_package_has_the_modules_the_check_knows():
    assert {"ipupod", "ipupod.client", "ipupod.calls", "ipupod.poptorch",
            "ipupod.poptorch.enums", "ipupod.v1.pod_pb2"} <= set(MODULES)
    for module in MODULES:
        assert check_python.layer_of(module) is not None, f"{module} is in no layer"


def test_a_cycle_the_packages_order_hides_fails_alone(tmp_path):
    # calls (loaded early by the package) defines PLANTED before it imports runs, and runs
    # imports PLANTED at its top: entered through the package both work, entered at runs
    # calls finds runs half-initialised
    root = os.path.dirname(importlib.util.find_spec("ipupod").origin)
    copy = tmp_path / "ipupod"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "calls.py", "a", encoding="utf-8") as file:
        file.write("\nPLANTED = 1\nfrom ipupod.runs import POLL_SECONDS  # noqa: E402,F401\n")
    runs = (copy / "runs.py").read_text()
    (copy / "runs.py").write_text(runs.replace(
        "\nimport grpc\n", "\nimport grpc\n\nfrom ipupod.calls import PLANTED  # noqa: F401\n", 1))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    as_users_do = subprocess.run([PYTHON, "-c", "import ipupod.runs"], capture_output=True,
                                 text=True, timeout=300, env=env, cwd="/")
    assert as_users_do.returncode == 0, as_users_do.stderr
    alone = subprocess.run([PYTHON, "-c", ALONE, "ipupod.runs"], capture_output=True, text=True,
                           timeout=300, env=env, cwd="/")
    assert alone.returncode != 0
    assert "POLL_SECONDS" in alone.stderr and "ipupod.runs" in alone.stderr, alone.stderr


@pytest.mark.parametrize("module", MODULES)
def test_imports_as_users_do(imports, module):
    done = imports[("as users do", module)]
    assert done.returncode == 0, f"import {module} failed:\n{done.stderr}"


@pytest.mark.parametrize("module", MODULES)
def test_imports_alone_and_loads_nothing_above_its_layer(imports, module):
    done = imports[("alone", module)]
    assert done.returncode == 0, f"{module} alone failed:\n{done.stderr}"
    loaded = json.loads(done.stdout)
    assert module in loaded
    own = check_python.layer_of(module)
    above = [m for m in loaded if (check_python.layer_of(m) or 0) > own]
    assert not above, f"importing {module} alone loaded modules of higher layers: {above}"
    unknown = [m for m in loaded if check_python.layer_of(m) is None]
    assert not unknown, f"modules in no layer of tools/check_python.py: {unknown}"
