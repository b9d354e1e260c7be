#!/usr/bin/env python3
"""docs/cli.md against the built `ipupod`: the commands come from `ipupod --help` itself
(every "Subcommands:" list, recursively), and for each one the reference must have a section
(`## ipupod PATH`) whose table names every option and positional its --help shows, and no
option or positional --help does not show. Global options are checked against
`ipupod --help` in the section "Global options".

Run by CTest (label unit) with IPUPOD_BUILD_DIR and IPUPOD_SOURCE_DIR set; by hand:
    IPUPOD_BUILD_DIR=build /usr/bin/python3 tests/docs/cli_reference_test.py
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import doc_sections as ds  # noqa: E402

SOURCE_DIR = os.environ.get("IPUPOD_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("IPUPOD_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
CLI = os.environ.get("IPUPOD_CLI_BINARY", os.path.join(BUILD_DIR, "client", "ipupod"))
REFERENCE = os.path.join(SOURCE_DIR, "docs", "cli.md")


def differences(helps, sections):
    """What the reference lacks or has too much, one message per difference."""
    problems = []
    for path, help_ in sorted(helps.items()):
        name = f"ipupod {path}".strip() if path else "the global options"
        doc = sections.get(path)
        if doc is None:
            heading = f"## ipupod {path}" if path else "## Global options"
            problems.append(f"docs/cli.md has no section for {name} (a heading '{heading}')")
            continue
        shown = help_.options - ds.HELP_FLAGS
        written = doc.options - ds.HELP_FLAGS
        for flag in sorted(shown - written):
            problems.append(f"docs/cli.md:{doc.line}: {name}: --help shows {flag}, "
                            "the section's table does not")
        for flag in sorted(written - shown):
            problems.append(f"docs/cli.md:{doc.line}: {name}: the section documents {flag}, "
                            "which --help no longer shows")
        for arg in sorted(help_.positionals - doc.positionals):
            problems.append(f"docs/cli.md:{doc.line}: {name}: --help shows the argument {arg}, "
                            "the section's table does not")
        for arg in sorted(doc.positionals - help_.positionals):
            problems.append(f"docs/cli.md:{doc.line}: {name}: the section documents the argument "
                            f"{arg}, which --help no longer shows")
    for path, doc in sorted(sections.items()):
        if path not in helps:
            problems.append(f"docs/cli.md:{doc.line}: a section for `ipupod {path}`, which is "
                            "not a command (ipupod --help)")
    return problems


class CliReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(CLI, os.X_OK):
            raise unittest.SkipTest(f"no ipupod at {CLI} (set IPUPOD_BUILD_DIR)")
        cls.helps = ds.commands(CLI)
        with open(REFERENCE, encoding="utf-8") as f:
            cls.sections = ds.reference_sections(f.read())

    def test_the_commands_come_from_the_help(self):
        # What the walk must find, so that an empty walk cannot pass.
        for path in ("", "info", "partition create", "job fetch", "compile", "run", "audit"):
            self.assertIn(path, self.helps)
        self.assertIn("--size", self.helps["partition create"].options)
        self.assertIn("-o", self.helps["job fetch"].options)
        self.assertIn("--output", self.helps["job fetch"].options)
        self.assertIn("NAME", self.helps["partition create"].positionals)
        self.assertIn("--tls-ca", self.helps[""].options)

    def test_the_reference_matches_the_help(self):
        problems = differences(self.helps, self.sections)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


class DifferencesTest(unittest.TestCase):
    """The comparison itself, on a made-up help and reference."""

    HELP = ("Usage: ipupod partition create [OPTIONS] NAME\n\nPositionals:\n"
            "  NAME NAME REQUIRED          Partition name\n\nOptions:\n"
            "  -h,--help                   Print this help message and exit\n"
            "  --size N REQUIRED           Number of IPUs\n"
            "  -o,--output FILE            Where\n"
            "  --limit N:UINT in [1 - 1000000]\n"
            "                              The first N\n")

    def doc(self, rows):
        table = "| argument | meaning |\n|---|---|\n" + "".join(f"| {r} | x |\n" for r in rows)
        return ("# CLI\n\n## ipupod partition create\n\nText with `--other` in it.\n\n" + table +
                "\n```sh\nipupod partition create p --size 4   # --unchecked in an example\n```\n")

    def problems(self, rows):
        helps = {"partition create": ds.parse_help(self.HELP)}
        return differences(helps, ds.reference_sections(self.doc(rows)))

    def test_a_complete_section_passes(self):
        rows = ["`NAME`", "`--size N`", "`-o`, `--output FILE`", "`--limit N`"]
        self.assertEqual(self.problems(rows), [])

    def test_a_missing_flag_alias_or_positional_is_named(self):
        problems = self.problems(["`--size N`", "`--output FILE`"])
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("--help shows --limit", problems[0])
        self.assertIn("--help shows -o", problems[1])
        self.assertIn("the argument NAME", problems[2])

    def test_a_flag_or_argument_help_no_longer_has_is_named(self):
        rows = ["`NAME`", "`--size N`", "`-o`, `--output FILE`", "`--limit N`", "`--gone X`",
                "`OLD`"]
        problems = self.problems(rows)
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("documents --gone, which --help no longer shows", problems[0])
        self.assertIn("the argument OLD", problems[1])

    def test_a_missing_or_extra_section_is_named(self):
        helps = {"partition create": ds.parse_help(self.HELP), "info": ds.Help()}
        sections = ds.reference_sections(self.doc(["`NAME`", "`--size N`", "`-o`, `--output F`",
                                                   "`--limit N`"]) + "\n## ipupod old\n")
        problems = differences(helps, sections)
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("no section for ipupod info", problems[0])
        self.assertIn("`ipupod old`, which is not a command", problems[1])

    def test_sh_blocks_join_continuations_and_drop_comments(self):
        text = ("## A\n```sh\n# a comment\nipupod a \\\n    --b 1   # c\n\nipupod d\n```\n"
                "## B\n```sh\nipupod e\n```\n```\nnot sh\n```\n")
        self.assertEqual(ds.sh_blocks(text), [(4, "ipupod a --b 1   # c"), (7, "ipupod d"),
                                              (11, "ipupod e")])
        self.assertEqual(ds.sh_blocks(text, under="B"), [(11, "ipupod e")])


if __name__ == "__main__":
    unittest.main()
