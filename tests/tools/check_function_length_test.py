#!/usr/bin/env python3
"""Tests of tools/check_function_length.py: what counts as a function, and its length."""
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get(
    "IPUPOD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import check_function_length as checker  # noqa: E402


def body(lines: int) -> str:
    """A function whose braces span exactly `lines` lines."""
    return "int f(int x) {\n" + "  x += 1;\n" * (lines - 3) + "  return x;\n}\n"


class FunctionLengthTest(unittest.TestCase):
    def lengths(self, code: str):
        return [(name, last - first + 1) for name, first, last in checker.functions(code)]

    def test_counts_from_opening_to_closing_brace(self):
        self.assertEqual(self.lengths(body(70)), [("f", 70)])

    def test_nested_blocks_and_lambdas_belong_to_their_function(self):
        code = ("void g() {\n  if (a) {\n    b();\n  }\n  auto l = [](int y) {\n"
                "    return y;\n  };\n  for (;;) {\n  }\n}\n")
        self.assertEqual(self.lengths(code), [("g", 10)])

    def test_methods_inside_classes_and_namespaces(self):
        code = ("namespace n {\nclass C {\n public:\n  int m() const {\n    return 1;\n  }\n};\n"
                "C::C() : x_(1) {\n}\n}  // namespace n\n")
        self.assertEqual(self.lengths(code), [("m", 3), ("C::C", 2)])

    def test_literals_comments_and_digit_separators_do_not_confuse_braces(self):
        code = ('int h() {\n  const char* s = "}{";\n  char c = \'}\';\n  // }\n'
                "  /* { */\n  int n = 160'000;\n  return n;\n}\nint k() {\n  return 0;\n}\n")
        self.assertEqual(self.lengths(code), [("h", 8), ("k", 3)])

    def test_initializers_are_not_functions(self):
        code = "const int kTable[] = {1, 2, 3};\nstruct S {\n  int a = 1;\n};\nS s{};\n"
        self.assertEqual(self.lengths(code), [])

    def test_command_fails_over_the_limit_and_names_the_function(self):
        with tempfile.TemporaryDirectory() as d:
            ok, long = os.path.join(d, "ok.cc"), os.path.join(d, "long.cc")
            with open(ok, "w") as f:
                f.write(body(70))
            with open(long, "w") as f:
                f.write(body(71))
            script = os.path.join(SOURCE_DIR, "tools", "check_function_length.py")
            passed = subprocess.run([sys.executable, script, ok], capture_output=True, text=True)
            self.assertEqual(passed.returncode, 0, passed.stdout)
            failed = subprocess.run([sys.executable, script, ok, long], capture_output=True,
                                    text=True)
            self.assertEqual(failed.returncode, 1)
            self.assertIn("long.cc:1: function 'f' is 71 lines", failed.stdout)


if __name__ == "__main__":
    unittest.main()
