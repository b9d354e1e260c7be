#!/usr/bin/env python3
"""Every example of README.md's tour and of docs/cli.md runs, in the order written.

For each document: a fresh ipupodd serving POD16 in open mode (ipupod.testing.LocalServer, as
`bash deploy/run-server.sh` serves it), a temporary directory holding the example files
(make_example_files.py), and then every logical line of the document's ```sh blocks run there
with `bash -o pipefail -c LINE`: `ipupod` (build/client) first on PATH, IPUPOD_SERVER the
server's address, IPUPOD_USER=alice, and no token, TLS or session of the caller's. A line must
exit 0, or N when it ends with the comment `# exits N`; a line whose comment says
`# (not run: REASON)` is skipped. The first line that does otherwise fails the test, named with
its file and line, its exit code and its output.

Run by CTest (label integration) with IPUPOD_BUILD_DIR, IPUPOD_SOURCE_DIR and PYTHONPATH
(build/python) set; by hand:
    PYTHONPATH=build/python IPUPOD_BUILD_DIR=build /usr/bin/python3 tests/docs/examples_test.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import doc_sections as ds  # noqa: E402
import make_example_files  # noqa: E402

SOURCE_DIR = os.environ.get("IPUPOD_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("IPUPOD_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
COMMAND_SECONDS = 300  # a compile, a training run or a job wait under a sanitizer included
_EXITS = re.compile(r"#\s*exits (\d+)\b")
_NOT_RUN = re.compile(r"#\s*\(not run: [^)]+\)")
# What the caller's environment must not bring in: another server, identity or session.
_CALLERS = ("IPUPOD_SERVER", "IPUPOD_TOKEN", "IPUPOD_USER", "IPUPOD_SESSION", "IPUPOD_IPUS",
            "IPUPOD_DEVICE_ID", "IPUPOD_TLS_CA", "IPUPOD_TLS_CERT", "IPUPOD_TLS_KEY")


def expected_exit(command):
    match = _EXITS.search(command)
    return int(match.group(1)) if match else 0


def runnable(examples):
    """The examples to run: all but those marked `# (not run: ...)`."""
    return [(line, command) for line, command in examples if not _NOT_RUN.search(command)]


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            from ipupod.testing import LocalServer  # build/python on PYTHONPATH
        except ImportError as error:
            raise unittest.SkipTest(f"the ipupod package is not importable ({error}); set "
                                    "PYTHONPATH=build/python")
        cls.LocalServer = LocalServer
        cli = os.environ.get("IPUPOD_CLI_BINARY", os.path.join(BUILD_DIR, "client", "ipupod"))
        cls.cli_dir = os.path.dirname(os.path.abspath(cli))
        if not os.access(os.path.join(cls.cli_dir, "ipupod"), os.X_OK):
            raise unittest.SkipTest(f"no ipupod in {cls.cli_dir} (set IPUPOD_BUILD_DIR)")

    def run_examples(self, document, examples):
        self.assertGreater(len(examples), 0, f"{document} has no examples to run")
        work = tempfile.mkdtemp(prefix="ipupod-examples-")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        make_example_files.main(work)
        env = {k: v for k, v in os.environ.items() if k not in _CALLERS}
        with self.LocalServer(pod="POD16", binary=os.environ.get("IPUPOD_SERVER_BINARY")) as server:
            env.update(PATH=self.cli_dir + os.pathsep + env.get("PATH", ""),
                       IPUPOD_SERVER=server.address, IPUPOD_USER="alice")
            for line, command in examples:  # in order: the first failure ends the test
                self.run_one(document, line, command, env, work, server)

    def run_one(self, document, line, command, env, work, server):
        try:
            result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=work, env=env,
                                    capture_output=True, text=True, timeout=COMMAND_SECONDS)
            code, out, err = result.returncode, result.stdout, result.stderr
        except subprocess.TimeoutExpired as timeout:
            code, out, err = "a timeout", str(timeout.stdout or ""), str(timeout.stderr or "")
        want = expected_exit(command)
        if code != want:
            self.fail(f"{document}:{line}: `{command}` exited {code}, not {want}\n"
                      f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}\n"
                      f"server log:\n{server.log(40)}")

    def test_the_readme_tour_runs(self):
        with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
            examples = ds.sh_blocks(f.read(), under="A tour of the CLI")
        self.run_examples("README.md", runnable(examples))

    def test_the_cli_reference_examples_run(self):
        with open(os.path.join(SOURCE_DIR, "docs", "cli.md"), encoding="utf-8") as f:
            examples = ds.sh_blocks(f.read())
        marked = len(examples) - len(runnable(examples))
        self.assertLessEqual(marked, 3, "examples marked not to run should be rare")
        self.run_examples("docs/cli.md", runnable(examples))


class MarkersTest(unittest.TestCase):
    def test_exit_and_not_run_markers(self):
        self.assertEqual(expected_exit("ipupod job wait 7 --timeout 2s   # exits 33"), 33)
        self.assertEqual(expected_exit("ipupod info   # the pod"), 0)
        examples = [(1, "ipupod info"), (2, "ipupod x   # (not run: needs a TLS server)")]
        self.assertEqual(runnable(examples), [(1, "ipupod info")])


if __name__ == "__main__":
    unittest.main()
