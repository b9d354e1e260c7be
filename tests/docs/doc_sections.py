"""Reading docs/cli.md and README.md, and `ipupod --help`, for the tests in this folder.

* CLI help: ``commands(binary)`` walks ``ipupod --help`` and every ``SUBCOMMAND``'s help (CLI11's
  "Subcommands:" list) and returns ``{path: Help}`` with each command's options (every name of
  each: ``-o``, ``--output``) and positionals (``NAME``).
* docs/cli.md: ``reference_sections(text)`` returns ``{path: Documented}`` for every heading
  ``## ipupod PATH`` (any level), from the heading to the next heading: the flag names and the
  positionals in the first cell of its table rows (``| `--size N` | ...``,
  ``| `-o`, `--output FILE` | ...``, ``| `NAME` | ...``); the section "Global options" is
  returned under the path "".
* Examples: ``sh_blocks(text, under=None)`` returns the ```sh blocks (of the section whose
  heading is ``under`` only, when given) as logical lines: continuation lines joined,
  comment-only and blank lines dropped.
"""
import re
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

HELP_FLAGS = {"-h", "--help"}  # every command has them; never compared
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


@dataclass
class Help:
    options: Set[str] = field(default_factory=set)
    positionals: Set[str] = field(default_factory=set)
    subcommands: List[str] = field(default_factory=list)


@dataclass
class Documented:
    line: int  # of the heading, 1-based
    options: Set[str] = field(default_factory=set)
    positionals: Set[str] = field(default_factory=set)


def parse_help(text: str) -> Help:
    """CLI11's help: "Positionals:", "Options:" and "Subcommands:" sections, each entry a line
    indented by two spaces (a description that does not fit goes on the next line, indented
    further, and is skipped)."""
    help_ = Help()
    section = ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":") if line.endswith(":") else ""
            continue
        match = re.match(r"^  (\S+)", line)
        if not match:
            continue
        first = match.group(1)
        if section == "Options" and first.startswith("-"):
            help_.options.update(name for name in first.split(",") if name)
        elif section == "Positionals":
            help_.positionals.add(first)
        elif section == "Subcommands":
            help_.subcommands.append(first)
    return help_


def commands(binary: str) -> Dict[str, Help]:
    """Every command path ("" for ipupod itself, "partition create", ...) and its help."""
    found: Dict[str, Help] = {}

    def walk(path: List[str]) -> None:
        result = subprocess.run([binary, *path, "--help"], capture_output=True, text=True,
                                timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"`ipupod {' '.join(path)} --help` exited {result.returncode}: "
                               f"{result.stderr}")
        help_ = parse_help(result.stdout)
        found[" ".join(path)] = help_
        for sub in help_.subcommands:
            walk(path + [sub])

    walk([])
    return found


def _headings(text: str) -> List[Tuple[int, int, str]]:
    """(line index, level, title) of every Markdown heading outside fenced code."""
    out = []
    fenced = False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"^(#+)\s+(.*?)\s*$", line)
        if match and not fenced:
            out.append((i, len(match.group(1)), match.group(2)))
    return out


def _section_lines(text: str, start: int) -> List[str]:
    """The lines after heading line `start`, up to the next heading."""
    lines = text.splitlines()
    following = [i for i, _, _ in _headings(text) if i > start]
    end = following[0] if following else len(lines)
    return lines[start + 1:end]


def _first_cell(row: str) -> Optional[str]:
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    if not cells or not cells[0].startswith("`"):
        return None
    return cells[0]


def documented(lines: List[str], heading_line: int) -> Documented:
    doc = Documented(line=heading_line + 1)
    fenced = False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            continue
        cell = _first_cell(line.replace("\\|", "/"))
        if cell is None:
            continue
        words = cell.strip("`").split()
        if words and re.match(r"^[A-Z][A-Z_]*$", words[0]):
            doc.positionals.add(words[0])
        else:
            doc.options.update(_FLAG.findall(cell))
    return doc


def reference_sections(text: str) -> Dict[str, Documented]:
    sections: Dict[str, Documented] = {}
    for i, _, title in _headings(text):
        path = None
        if title == "Global options":
            path = ""
        elif title.startswith("ipupod "):
            path = title[len("ipupod "):].strip()
        if path is None:
            continue
        if path in sections:
            raise ValueError(f"two sections document `ipupod {path}` (line {i + 1})")
        sections[path] = documented(_section_lines(text, i), i)
    return sections


def sh_blocks(text: str, under: Optional[str] = None) -> List[Tuple[int, str]]:
    """(line number, command) of every logical line of the ```sh blocks (of section `under`)."""
    lines = text.splitlines()
    allowed = range(len(lines))
    if under is not None:
        starts = [i for i, _, title in _headings(text) if title == under]
        if not starts:
            raise ValueError(f"no section '{under}'")
        allowed = range(starts[0], starts[0] + 1 + len(_section_lines(text, starts[0])))
    out: List[Tuple[int, str]] = []
    in_sh = False
    pending: Optional[Tuple[int, str]] = None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_sh = line.strip() == "```sh" and i in allowed
            continue
        if not in_sh:
            continue
        if pending is not None:
            number, command = pending
            pending = None
            line = command + " " + line.strip()
        else:
            number = i + 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
        else:
            out.append((number, line.strip()))
    return out
