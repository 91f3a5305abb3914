"""ARCHITECTURE.md and the README say what the code is: the table of imports between packages is the
one the code has, each row importing only rows below it (no import circle between packages); every
package of src/hotstack/ has a row; every path the document names exists; every page of docs/ is linked
from the README, and every relative link of the project's documents leads to a file and heading."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hotstack

SRC = Path(hotstack.__file__).resolve().parent
ROOT = SRC.parent.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
HELPERS = {"errors.py", "malloc.py", "cache_files.py", "content_hash.py", "text.py", "units.py", "gc_policy.py",
           "__init__.py", "__main__.py"}


def _unit(path: Path) -> str:
    """The room a module of src/hotstack/ belongs to: its package (`name/`) or its own file."""
    first = path.relative_to(SRC).parts[0]
    return first + "/" if (SRC / first).is_dir() else first


def _target_unit(parts: list[str]) -> str | None:
    if not parts:
        return None
    if (SRC / parts[0]).is_dir():
        return parts[0] + "/"
    return parts[0] + ".py" if (SRC / f"{parts[0]}.py").exists() else None


def _imported(path: Path) -> set[str]:
    """The rooms a module imports: `import hotstack.x`, `from hotstack.x`, relative imports, and
    `__import__("hotstack.x")` (an import made only when a command runs)."""
    package = list(path.relative_to(SRC).parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[list[str]] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[1:] for a in node.names if a.name.startswith("hotstack.")]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            module = base + (node.module.split(".") if node.module else [])
            names = [module] if node.module else [module + [a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hotstack"):
            module = node.module.split(".")[1:]
            names = [module] if module else [[a.name] for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__"
              and node.args and isinstance(node.args[0], ast.Constant)
              and str(node.args[0].value).startswith("hotstack.")):
            names = [str(node.args[0].value).split(".")[1:]]
        found.update(u for u in map(_target_unit, names) if u)
    return found


def code_imports() -> dict[str, set[str]]:
    """Room -> the rooms it imports, helpers left out, from every module of src/hotstack/."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        unit = _unit(path)
        if unit in HELPERS:
            continue
        graph.setdefault(unit, set()).update(_imported(path) - HELPERS - {unit})
    return graph


def documented_imports() -> list[tuple[list[str], set[str]]]:
    """The rows of ARCHITECTURE.md's import table, in order: (rooms, the rooms they import). A room
    is written `name/` for a package and `name.py` for a module; notes in parentheses are skipped."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("| package | imports |"):].split("\n\n")[0].splitlines()[2:]
    rows = []
    for line in table:
        _, rooms, imports, _ = line.split("|")
        imports = re.sub(r"\([^)]*\)", "", imports)
        named = {n if n.endswith(".py") else n + "/" for n in re.findall(r"`([^`]+)`", imports)}
        rows.append((re.findall(r"`([^`]+)`", rooms), named))
    return rows


def test_the_import_table_is_the_code_s():
    code = code_imports()
    documented = {room: imports for rooms, imports in documented_imports() for room in rooms}
    assert set(documented) == set(code), "rooms of ARCHITECTURE.md's table against src/hotstack/"
    wrong = {room: (sorted(documented[room]), sorted(code[room])) for room in code
             if documented[room] != code[room]}
    assert not wrong, f"room: (ARCHITECTURE.md says, the code imports): {wrong}"


def test_each_room_imports_only_rooms_below_it():
    order = [room for rooms, _ in documented_imports() for room in rooms]
    code = code_imports()
    upward = {room: sorted(i for i in code[room] if order.index(i) <= order.index(room)) for room in code}
    assert not {room: up for room, up in upward.items() if up}


def test_every_path_architecture_names_exists():
    """A path in backquotes (`sampling/engine.py`, `runtimes/common/memory.ReadThrough`, `bpf/nu_maps.h`)
    is a file or directory of src/hotstack/, or of the repository; placeholders (`<name>`) and
    braces (`schema.{h,py}`) are patterns, not paths."""
    missing = []
    for token in set(re.findall(r"`([\w./*-]+/[\w./*-]*|[\w-]+\.(?:py|h|c|yaml|html))`", ARCHITECTURE.read_text())):
        if token.startswith("/"):
            continue                      # a path of the profiled host (/proc/PID/maps), not of the repository
        stem = token.rstrip("/")
        guesses = {stem, re.sub(r"\.[A-Za-z_]\w*$", "", stem) + ".py", re.sub(r"\.[A-Za-z_]\w*$", "", stem)}
        if not any(list(base.glob(g)) for base in (SRC, ROOT, SRC / "runtimes") for g in guesses) \
                and not any(SRC.rglob(stem)):
            missing.append(token)
    assert not missing


def _headings(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (fenced blocks left out)."""
    anchors, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#+\s+(.*)", line) if not fenced else None
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert [p.name for p in (ROOT / "docs").glob("*.md") if f"(docs/{p.name}" not in readme] == []


def test_every_relative_link_leads_to_a_file_and_heading():
    documents = [ROOT / "README.md", ARCHITECTURE, ROOT / "bench" / "RESULTS.md", *(ROOT / "docs").glob("*.md")]
    broken = []
    for document in documents:
        for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text()):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path) if path else document
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _headings(linked)):
                broken.append(f"{document.name}: {target}")
    assert broken == []
