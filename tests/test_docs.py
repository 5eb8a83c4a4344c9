"""The documentation holds to the code: README.md stays a short front page with a BibTeX entry that agrees with
CITATION.cff; every relative link of README.md and docs/*.md points at a file (and heading) that exists; every
`capsbench <command>` they show is a command of the CLI; every capsbench.<name> they cite can be imported; every
repository path README.md and docs/developing.md (the recipes) name exists; and the floors docs/developing.md states
hold: no module imports one on a floor above its own."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from capsbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEVELOPING = ROOT / "docs" / "developing.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 12_000  # bytes: the front page stays at most 12 KB

FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.DOTALL | re.MULTILINE)
BLOCK = re.compile(r"^```(?!bibtex)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)  # code blocks, not citations
SPAN = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line, as CommonMark allows
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
COMMAND = re.compile(r"(?<![\w.-])capsbench ([a-z][\w-]*)(?: ([a-z]\w*))?")
DOTTED = re.compile(r"(?<![\w.])capsbench(?:\.[A-Za-z_]\w*)+")
TOP = "capsbench|tests|suites|baselines|benchmarks|examples|results|docs|\\.ci"
REPO_PATH = re.compile(rf"(?<![\w./<>-])((?:{TOP})/[\w./<>*{{}},-]*)")
PLACEHOLDER = re.compile(r"[<*{]")
LIST_KINDS = ("models", "datasets", "suites", "attacks", "checkpoints")


def code_of(text: str) -> list[str]:
    """The code a Markdown text shows: its fenced blocks (a BibTeX entry is not code) and its inline code spans."""
    blocks = [re.sub(r"(^|\s)#.*$", "", b, flags=re.MULTILINE) for b in BLOCK.findall(text)]  # comments are prose
    return blocks + [re.sub(r"\s+", " ", span) for span in SPAN.findall(FENCE.sub("", text))]


def prose_of(text: str) -> str:
    """A Markdown text without its code (fenced blocks and inline spans)."""
    return SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose file (or heading) does not exist, as written."""
    broken = []
    for target in LINK.findall(prose_of(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    return broken


def commands_shown(text: str) -> list[tuple[str, str | None]]:
    """(command, its first argument) of every `capsbench <command>` in the text's code."""
    found = []
    for code in code_of(text):
        for m in COMMAND.finditer(code):
            if code[max(0, m.start() - 5):m.start()] not in ("from ",) and not code[:m.start()].endswith("import "):
                found.append((m.group(1), m.group(2)))
    return found


def defined_names(source: Path) -> dict[str, ast.AST | str]:
    """The names a module defines at its top level (functions, classes, assignments, imports), and those it loads
    lazily on first use (a `_LAZY` table or a `lazy_attributes(__name__, {...})` table: name -> "module:Name")."""
    tree = ast.parse(source.read_text())
    names: dict[str, ast.AST | str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update({n.id: node for n in ast.walk(target) if isinstance(n, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    for node in ast.walk(tree):
        table = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            table = node.value
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_attributes" and len(node.args) > 1:
            table = node.args[1]
        if isinstance(table, ast.Dict):
            names.update({k.value: v.value for k, v in zip(table.keys, table.values)
                          if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)})
    return names


def module_file(name: str) -> Path | None:
    """The source file of module capsbench.<...> `name`, found on disk (nothing is imported), or None."""
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def resolves(dotted: str) -> bool:
    """Whether capsbench.<module>[.<name>[.<member>]] exists, read from the sources (nothing is imported)."""
    parts = dotted.split(".")
    depth = next(i for i in range(len(parts), 0, -1) if module_file(".".join(parts[:i])) is not None)
    source, rest = module_file(".".join(parts[:depth])), parts[depth:]
    if not rest:
        return True
    names = defined_names(source)
    found = names.get(rest[0])
    if found is None:
        return False
    if isinstance(found, str):  # a lazy name: its target must exist
        module, _, name = found.partition(":")
        return resolves(".".join([module, name, *rest[1:]]))
    if len(rest) == 1:
        return True
    if isinstance(found, ast.ClassDef) and len(rest) == 2:
        members = {n.name for n in found.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        members |= {t.id for n in found.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        return rest[1] in members
    return False


def unresolved_names(text: str) -> list[str]:
    """The capsbench.<name> of the text that do not exist (modules, the names they define, a class's members)."""
    return [dotted for dotted in sorted(set(DOTTED.findall(text))) if not resolves(dotted)]


def missing_paths(text: str) -> list[str]:
    """The repository paths a text names that do not exist; for a path with a placeholder (<name>, *, {a,b}), the
    folder before the placeholder."""
    missing = []
    for raw in sorted(set(REPO_PATH.findall(text))):
        path = raw.rstrip(".,:;")
        cut = PLACEHOLDER.search(path)
        present = path[: cut.start()].rpartition("/")[0] if cut else path
        if not (ROOT / present).exists():
            missing.append(path)
    return missing


def floors(page: Path) -> list[list[str]]:
    """The floors stated under "The floors of the house": the first ```text block after that heading, top first."""
    text = page.read_text().split("## The floors of the house", 1)[1]
    block = re.search(r"```text\n(.*?)```", text, re.DOTALL).group(1)
    return [[room.strip() for room in line.split(",")] for line in block.strip().splitlines()]


def room_of(module: str) -> str:
    """capsbench.run.driver -> run; capsbench.cli -> cli; capsbench -> the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "capsbench"


def imports(path: Path) -> list[str]:
    """Every capsbench module a source file imports, lazy imports inside functions included."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.append(base)
    return [m for m in found if m == "capsbench" or m.startswith("capsbench.")]


def upward_imports(stated: list[list[str]]) -> list[str]:
    """Each import from a module to a room that is not on a floor below its own (or a room no floor holds)."""
    level = {room: i for i, rooms in enumerate(stated) for room in rooms}
    wrong = []
    for path in sorted((ROOT / "capsbench").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module == "capsbench.__init__":  # the package's front door: what `import capsbench` offers
            continue
        own = room_of(module)
        for target in imports(path):
            room = room_of(target)
            if own not in level or room not in level:
                wrong.append(f"{module} -> {target}: {own if own not in level else room} is on no floor")
            elif room != own and level[room] <= level[own]:
                wrong.append(f"{module} -> {target}")
    return wrong


def test_readme_is_a_short_front_page():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size:,} bytes; move detail into docs/ (limit {README_LIMIT:,})"


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    assert "pip install uv && uv run capsbench run suite=robustness" in text
    assert "uv run --all-extras pytest" in text


def test_readme_has_a_bibtex_entry_that_agrees_with_citation_cff():
    blocks = re.findall(r"```bibtex\n(.*?)```", README.read_text(), re.DOTALL)
    assert len(blocks) == 1, "README.md needs one ```bibtex block"
    entry = blocks[0]
    assert re.match(r"\s*@(misc|software)\{\w+,", entry), entry
    fields = {k.lower(): v for k, v in re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", entry, re.MULTILINE)}
    plain = {k: v.replace("{", "").replace("}", "") for k, v in fields.items()}
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for ref in (cff, cff.get("preferred-citation", cff)):
        assert plain["title"] == ref["title"]
        assert plain["version"] == str(ref["version"])
        assert plain["author"] == " and ".join(a["name"] for a in ref["authors"])
        assert plain["year"] == str(ref.get("year", str(cff["date-released"])[:4]))
    url = cff.get("repository-code") or cff.get("url")
    assert plain.get("url") == url, "BibTeX and CITATION.cff must give the same URL, or none"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_capsbench_command_shown_exists(page):
    commands = set(get_command(app).commands)
    shown = commands_shown(page.read_text())
    assert [c for c, _ in shown if c not in commands] == []
    assert [arg for c, arg in shown if c == "list" and arg not in (None, *LIST_KINDS)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_capsbench_name_cited_exists(page):
    assert unresolved_names(page.read_text()) == []


@pytest.mark.parametrize("page", [README, DEVELOPING], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(page):
    assert missing_paths(page.read_text()) == []


def test_the_recipes_name_the_files_to_touch():
    text = DEVELOPING.read_text()
    for recipe in ("### A model", "### An attack", "### A suite", "### A dataset", "### A claim"):
        assert recipe in text
    for path in ("capsbench/models/__init__.py", "capsbench/attacks/__init__.py", "capsbench/suites/__init__.py",
                 "capsbench/data/catalog.py", "capsbench/data/files.py", "capsbench/reporting/claim_files.py"):
        assert f"`{path}`" in text, path


def test_no_import_points_up_a_floor():
    stated = floors(DEVELOPING)
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "capsbench").rglob("*.py")]
    rooms = {room_of(m) for m in modules if m != "capsbench.__init__"}
    assert rooms == {room for floor in stated for room in floor}
    assert upward_imports(stated) == []


def test_the_checks_find_what_is_wrong(tmp_path):
    """Each check above fails on a page that is wrong: a missing file, a missing heading, an unknown command, an
    unknown name, a missing path, an import that points up."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [no heading](#nowhere) [web](https://example.org)\n\n"
                    "`capsbench runn suite=x` and `capsbench list modles`\n")
    assert broken_links(page) == ["missing.md", "#nowhere"]
    assert commands_shown(page.read_text()) == [("runn", "suite"), ("list", "modles")]
    assert unresolved_names("`capsbench.models.register_model` `capsbench.models.no_such_name` "
                            "`capsbench.no_such_module.x`") == ["capsbench.models.no_such_name",
                                                                "capsbench.no_such_module.x"]
    assert missing_paths("`capsbench/models/<name>.py` `capsbench/nowhere/<name>.py` `tests/test_docs.py` "
                         "`tests/no_such_test.py`") == ["capsbench/nowhere/<name>.py", "tests/no_such_test.py"]
    inverted = [list(reversed(f)) for f in reversed(floors(DEVELOPING))]
    assert upward_imports(inverted)


# --- the docs' settings and defaults against the composed config ------------------------------------------------------
USER_PAGES = [README, *(p for p in PAGES if p not in (README, DEVELOPING))]
SETTING = re.compile(r"(?<![\w.$/-])([a-z][\w]*(?:\.[\w<>]+)*)=(?!=)")
FREE_FORM = ("model_args.", "model_train.", "register.", "weights.", "claim_args.")  # keyed by a user's names
RUN_COMMAND = re.compile(r"capsbench (run|show-config|train|report)\b([^\n`#]*)")
DEVELOPER_PATHS = ("../shared", "shared/datasets")


def _flat_keys(cfg) -> set[str]:
    from capsbench.config.compose import to_dict
    from capsbench.tracking import flatten

    flat = flatten(to_dict(cfg))
    return {prefix for key in flat for prefix in _prefixes(key)}


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@functools.cache
def known_keys() -> dict[str, set[str]]:
    """Every key a `capsbench run` (any suite, any budget) and a `capsbench report` accept, with their parents."""
    from composing import compose

    from capsbench.config.compose import compose_report
    from capsbench.config.request import Request, parse_command_line
    from capsbench.suites import CATALOG

    run = set().union(*(_flat_keys(compose([f"suite={s}", f"budget={b}"], resolve_device=False))
                        for s in CATALOG.names() for b in ("smoke", "quick", "paper")))
    run |= {"suite", "config", "launcher", "claims", "remeasure", "claim_args"}
    report = _flat_keys(compose_report(Request(parse_command_line([]).line)))
    return {"run": run, "show-config": run, "train": run | {"model"}, "report": report}


def unknown_settings(text: str) -> list[str]:
    """The key=value settings of the `capsbench run|show-config|train|report` commands a text shows whose key the
    command does not accept."""
    keys, wrong = known_keys(), []
    for code in code_of(text):
        for command, rest in RUN_COMMAND.findall(code):
            for key in SETTING.findall(rest):
                if key.startswith(FREE_FORM) or key in keys[command]:
                    continue
                wrong.append(f"capsbench {command} ... {key}=")
    return wrong


def stated_defaults(page: Path) -> dict[str, str]:
    """The `| `key` | `default` | ... |` rows of a page's "Keys" section whose default is one code span."""
    keys = page.read_text().split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([\w.]+)` \| `([^`|]+)` \|", keys, re.MULTILINE))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_setting_shown_is_a_key_of_its_command(page):
    assert unknown_settings(page.read_text()) == []


def test_the_keys_table_states_the_composed_defaults():
    import yaml as _yaml
    from composing import compose

    from capsbench.config.compose import to_dict
    from capsbench.tracking import flatten

    flat = flatten(to_dict(compose(["suite=robustness"], resolve_device=False)))
    stated = stated_defaults(ROOT / "docs" / "running.md")
    assert len(stated) >= 8
    for key, text in stated.items():
        assert key in flat, f"docs/running.md states a default for {key}, which is no setting"
        value = _yaml.safe_load(text)
        if isinstance(flat[key], str) and Path(flat[key]).is_absolute() and not Path(str(value)).is_absolute():
            value = str(Path(value).resolve())  # a relative path as given, resolved as the run resolves it
        assert value == flat[key], f"docs/running.md: {key} defaults to {flat[key]!r}, not {text}"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_docs_hold_no_developer_machine_paths(page):
    text = page.read_text()
    assert [p for p in DEVELOPER_PATHS if p in text] == []


def test_the_settings_check_finds_a_typo():
    assert unknown_settings("`capsbench run suite=robustness output_dri=x params.apgd_step=3 seeds=[0]`") == [
        "capsbench run ... output_dri=", "capsbench run ... params.apgd_step="]
    assert unknown_settings("`capsbench report latex.eps=[0.1] claims=true`") == []


def results_index() -> dict[str, str]:
    """results/README.md's table: each file it names (first column) -> the row."""
    rows = {}
    for line in (ROOT / "results" / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            for name in re.findall(r"`([^`]+)`", first):
                rows[name] = line
    return rows


def test_the_results_index_lists_every_committed_result_and_nothing_else():
    index = results_index()
    files = {p.name for p in (ROOT / "results").iterdir() if p.is_file() and p.name != "README.md"}
    assert sorted(files - set(index)) == [], "results/README.md must list every committed result file"
    assert sorted(set(index) - files) == [], "results/README.md names files that are not in results/"


def test_each_result_states_its_command_and_the_index_quotes_it():
    """A results file says how it was made (a `capsbench` or `benchmarks/` command in code); the index row quotes
    one command the file itself holds, so that the two cannot drift apart."""
    for name, row in results_index().items():
        if not name.endswith(".md"):
            continue
        text = (ROOT / "results" / name).read_text()
        commands = [c for c in re.findall(r"`([^`]+)`", row.split("|")[2]) if "capsbench" in c or "benchmarks/" in c]
        assert commands, f"results/README.md row of {name} quotes no command"
        assert any(c in text for c in commands), f"{name} does not hold the command its index row quotes: {commands}"
