"""Install extras (pyproject.toml): every third-party import is declared in the extra of the
code that imports it, the operator and the dashboard import neither torch nor the worker
package, and ``pip`` resolves ``.[operator]`` without torch.

The import contract is read from the source (AST), so it also covers imports inside
functions: a module-level import of ``specd/commands/<name>.py`` belongs to the base install
(the parser is built from it), one inside a function to that command's extra
(``specd.cli.COMMAND_EXTRAS``).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from specd.cli import COMMAND_EXTRAS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# import name -> the distribution that provides it (PEP 503-normalised)
DISTRIBUTION = {
    "yaml": "pyyaml", "pydantic": "pydantic", "httpx": "httpx",
    "torch": "torch", "transformers": "transformers", "gguf": "gguf",
    "accelerate": "accelerate", "safetensors": "safetensors", "numpy": "numpy",
    "tqdm": "tqdm", "matplotlib": "matplotlib", "fastapi": "fastapi",
    "starlette": "fastapi",  # fastapi's own foundation, always installed with it
    "uvicorn": "uvicorn", "prometheus_client": "prometheus-client",
    "kopf": "kopf", "kubernetes": "kubernetes", "prometheus_api_client": "prometheus-api-client",
    "requests": "requests", "urllib3": "urllib3", "sqlalchemy": "sqlalchemy", "alembic": "alembic",
    "psycopg": "psycopg", "streamlit": "streamlit", "pandas": "pandas",
    "cryptography": "cryptography", "psutil": "psutil", "pytest": "pytest",
}
# what the worker never needs and the operator and dashboard must never import
HEAVY = ("torch", "transformers", "specd.worker")


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared(extra: str) -> set[str]:
    """Distributions an install of ``specd[extra]`` has ('base': the plain install)."""
    names = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    if extra == "base":
        return names
    for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
        match = re.fullmatch(r"specd\[([\w,]+)\]", requirement)
        if match:
            for inner in match.group(1).split(","):
                names |= declared(inner)
        else:
            names.add(_name(requirement))
    return names


def extra_of(path: Path) -> str:
    """The extra a module's top-level imports must be in."""
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith(("api/", "specd/commands/")) or rel in ("specd/__init__.py",
                                                              "specd/cli.py"):
        return "base"
    if rel.startswith("specd/kubectl/"):
        return "operator"  # kubectl specd reads the cluster and the history store
    return {"worker": "worker", "operator": "operator", "dashboard": "dashboard",
            "pilot": "pilot"}[
        rel.split("/", 1)[0]]


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module, inside a function) for every import, skipping ``if TYPE_CHECKING:`` blocks."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                           ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def sources() -> list[Path]:
    return sorted(p for folder in ("api", "specd", "worker", "operator", "dashboard", "pilot")
                  for p in (ROOT / folder).rglob("*.py"))


def test_every_import_is_declared_in_its_extra() -> None:
    problems = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        for module, in_function in imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ("specd", "specd_dev", "__future__"):
                continue
            extra = extra_of(path)
            if rel.startswith("specd/commands/") and in_function:
                extra = COMMAND_EXTRAS[path.stem]
            dist = DISTRIBUTION.get(top)
            if dist is None:
                problems.append(f"{rel}: {module} is not in DISTRIBUTION (and pyproject?)")
            elif dist not in declared(extra):
                problems.append(f"{rel}: {module} ({dist}) is not in specd[{extra}]")
    assert not problems, "\n".join(problems)


def test_every_command_has_an_extra() -> None:
    from specd.cli import COMMANDS

    assert set(COMMAND_EXTRAS) == set(COMMANDS)
    assert set(COMMAND_EXTRAS.values()) <= set(PYPROJECT["project"]["optional-dependencies"])


def test_operator_and_dashboard_import_neither_torch_nor_the_worker() -> None:
    problems = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        if extra_of(path) not in ("operator", "dashboard") and not rel.startswith(
                ("api/", "specd/commands/operator.py", "specd/commands/db.py",
                 "specd/commands/dashboard.py", "specd/cli.py")):
            continue
        for module, _ in imports(path):
            if any(module == h or module.startswith(h + ".") for h in HEAVY):
                problems.append(f"{rel}: imports {module}")
    assert not problems, "\n".join(problems)


def test_the_extras_are_disjoint_where_it_matters() -> None:
    heavy = {"torch", "transformers", "accelerate", "gguf"}
    for extra in ("base", "operator", "dashboard"):
        assert not heavy & declared(extra), extra
    assert "streamlit" not in declared("operator") and "kopf" not in declared("dashboard")
    assert declared("dev") >= declared("worker") | declared("operator") | declared("dashboard")


@pytest.mark.slow
def test_pip_resolves_the_operator_extra_without_torch(tmp_path: Path) -> None:
    """``pip install --dry-run --report`` of ``.[operator]`` in an empty target: the full
    dependency tree, as a fresh operator image would install it."""
    report = tmp_path / "report.json"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--report", str(report), f"{ROOT}[operator]"],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and re.search(r"(?i)connection|network|resolve host|timed out|"
                                         r"no matching distribution", out.stderr):
        pytest.skip(f"PyPI is unreachable: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())[
        "install"]}
    assert {"kopf", "kubernetes", "sqlalchemy", "alembic", "specd"} <= names
    assert not names & {"torch", "transformers", "streamlit", "triton"}, sorted(names)
    assert not any(n.startswith("nvidia-") for n in names), sorted(names)


def test_nothing_shipped_imports_the_dev_tools() -> None:
    """The local cluster and the test helpers (tools/, ``specd_dev``) are not in the package:
    only ``specd cluster``'s run may reach for them (and says how to install them)."""
    problems = [f"{path.relative_to(ROOT)}: imports {module}"
                for path in sources() for module, in_function in imports(path)
                if module.split(".")[0] == "specd_dev"
                and not (path == ROOT / "specd" / "commands" / "cluster.py" and in_function)]
    assert not problems, "\n".join(problems)
    setup = (ROOT / "setup.py").read_text()
    assert "tools" not in setup.split("ROOTS = {", 1)[1].split("}", 1)[0]
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    assert "*" in dockerignore and "!tools/" not in dockerignore  # no image gets it
