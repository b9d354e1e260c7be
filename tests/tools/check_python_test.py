#!/usr/bin/env python3
"""Tests of tools/check_python.py: the package passes, and each kind of planted fault in a
copy of it (an upward import, a cycle, a function-level import, a private name, a module in
no layer) fails the check; pyflakes' reports fail it unless a matching `# noqa` covers them.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get(
    "IPUPOD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "tools", "check_python.py")
PACKAGE = os.path.join(SOURCE_DIR, "python", "ipupod")
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import check_python as checker  # noqa: E402


class LayersTest(unittest.TestCase):
    def setUp(self):
        self.temp = tempfile.TemporaryDirectory()
        self.package = os.path.join(self.temp.name, "ipupod")
        shutil.copytree(PACKAGE, self.package,
                        ignore=shutil.ignore_patterns("__pycache__", "*_pb2*.py"))

    def tearDown(self):
        self.temp.cleanup()

    def plant(self, module_path: str, text: str) -> None:
        with open(os.path.join(self.package, module_path), "a", encoding="utf-8") as file:
            file.write(text)

    def check(self):
        """The command's exit status and output on the copy."""
        done = subprocess.run([sys.executable, SCRIPT, "--layers", self.package],
                              capture_output=True, text=True)
        return done.returncode, done.stdout

    def test_the_package_as_it_is_passes(self):
        self.assertEqual(checker.layer_problems(PACKAGE), [])
        status, output = self.check()
        self.assertEqual(status, 0, output)
        self.assertIn("without a cycle", output)

    def test_an_upward_import_that_closes_a_cycle_fails(self):
        self.plant("errors.py", "\nfrom ipupod import client  # noqa: E402\n")
        status, output = self.check()
        self.assertEqual(status, 1)
        self.assertIn("ipupod.errors (layer 'leaves') imports ipupod.client (layer 'client'), "
                      "a higher layer", output)
        [cycle] = [line for line in output.splitlines() if "import cycle:" in line]
        self.assertIn("ipupod.errors (", cycle)
        self.assertIn("-> ipupod.client (", cycle)

    def test_a_cycle_inside_one_layer_fails(self):
        # runs and session share a layer: importing upward is not the fault, the cycle is
        self.plant("runs.py", "\nimport ipupod.session  # noqa: E402\n")
        problems = checker.layer_problems(self.package)
        self.assertEqual(len(problems), 1, problems)
        self.assertRegex(problems[0], r"^import cycle: ipupod.runs \(.*runs.py:\d+\) -> "
                         r"ipupod.session \(.*session.py:\d+\) -> ipupod.runs$")

    def test_an_import_under_type_checking_counts(self):
        self.plant("runs.py", "\nif TYPE_CHECKING:\n    from ipupod.session import Session\n")
        self.assertTrue(any(p.startswith("import cycle") for p in
                            checker.layer_problems(self.package)))

    def test_a_function_level_import_fails_even_without_a_cycle(self):
        self.plant("jobs.py", "\n\ndef later():\n    from ipupod import runs\n    return runs\n")
        problems = checker.layer_problems(self.package)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("ipupod.jobs imports ipupod.runs inside a function", problems[0])

    def test_importing_another_modules_private_name_fails(self):
        self.plant("calls.py", "\nfrom ipupod.transport import _host_of  # noqa: E402,F401\n")
        problems = checker.layer_problems(self.package)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("imports _host_of from ipupod.transport, a private name", problems[0])

    def test_a_private_module_and_dunder_names_are_fine(self):
        self.plant("poptorch/data.py", "\nfrom ipupod.poptorch import _cache  # noqa: E402\n"
                   "from ipupod import __version__  # noqa: E402\n")
        self.assertEqual(checker.layer_problems(self.package), [])

    def test_a_module_in_no_layer_fails(self):
        with open(os.path.join(self.package, "extra.py"), "w", encoding="utf-8") as file:
            file.write('"""New."""\n')
        problems = checker.layer_problems(self.package)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("ipupod.extra is in no layer", problems[0])

    def test_poptorch_may_not_import_its_own_package(self):
        self.plant("poptorch/options.py", "\nfrom ipupod import poptorch  # noqa: E402\n")
        problems = checker.layer_problems(self.package)
        self.assertIn("(layer 'poptorch') imports ipupod.poptorch (layer 'poptorch package')",
                      "\n".join(problems))


class PyflakesTest(unittest.TestCase):
    def flakes(self, source: str):
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "m.py")
            with open(path, "w", encoding="utf-8") as file:
                file.write(source)
            return checker.pyflakes_problems([path])

    def test_reports_fail_unless_a_noqa_names_their_code(self):
        [problem] = self.flakes("import os\n")
        self.assertRegex(problem, r"m.py:1:1: F401 'os' imported but unused$")
        self.assertEqual(self.flakes("import os  # noqa: F401 - re-exported\n"), [])
        self.assertEqual(self.flakes("import os  # noqa\n"), [])
        self.assertEqual(len(self.flakes("import os  # noqa: E402\n")), 1)
        [problem] = self.flakes("def f():\n    x = 1  # noqa: F401\n")
        self.assertIn("F841 local variable 'x' is assigned to but never used", problem)
        self.assertIn("F821 undefined name 'y'", self.flakes("print(y)\n")[0])

    def test_the_command_fails_on_a_report_and_passes_a_clean_file(self):
        with tempfile.TemporaryDirectory() as temp:
            clean, dirty = os.path.join(temp, "clean.py"), os.path.join(temp, "dirty.py")
            with open(clean, "w", encoding="utf-8") as file:
                file.write("import os\nprint(os.sep)\n")
            with open(dirty, "w", encoding="utf-8") as file:
                file.write("import sys\n")
            passed = subprocess.run([sys.executable, SCRIPT, "--pyflakes", clean],
                                    capture_output=True, text=True)
            self.assertEqual(passed.returncode, 0, passed.stdout)
            failed = subprocess.run([sys.executable, SCRIPT, "--pyflakes", clean, dirty],
                                    capture_output=True, text=True)
            self.assertEqual(failed.returncode, 1)
            self.assertIn("dirty.py:1:1: F401 'sys' imported but unused", failed.stdout)


if __name__ == "__main__":
    unittest.main()
