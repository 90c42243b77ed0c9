"""The stdlib-only import contract (dev/warden_dev/importrules.py) that `make lint` runs: a planted import
breaks it, and the operator's own tree keeps it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from warden_dev.importrules import outside_imports

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_imports_outside_the_standard_library_and_the_named_modules_are_named() -> None:
    imports = {
        "warden.node.main": {"json", "os.path", "warden.slurm.cli", "warden.node.files"},
        "warden.node.files": {"yaml", "warden.render.pods"},
        "warden.handlers": {"kopf"},  # not a source: not checked
    }
    sources = frozenset({"warden.node", "warden.slurm.cli"})
    assert outside_imports(imports, sources) == [
        ("warden.node.files", "warden.render.pods"),
        ("warden.node.files", "yaml"),
    ]


def _lint(tmp_path: Path, planted: str) -> subprocess.CompletedProcess[str]:
    pkg = tmp_path / "pkg"
    (pkg / "node").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "heavy.py").write_text("import jinja2\n")
    (pkg / "node" / "__init__.py").write_text("")
    (pkg / "node" / "main.py").write_text(f"import json\n{planted}\n")
    config = tmp_path / ".importlinter"
    config.write_text(
        textwrap.dedent("""\
        [importlinter]
        root_package = pkg
        include_external_packages = True
        contract_types =
            stdlib_only: warden_dev.importrules.StdlibOnly

        [importlinter:contract:node]
        name = node imports only the standard library
        type = stdlib_only
        source_modules =
            pkg.node
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "dev")])}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_planted_import_breaks_the_contract_and_says_where(tmp_path: Path) -> None:
    kept = _lint(tmp_path, "import os")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    broken = _lint(tmp_path, "from pkg import heavy")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "pkg.node.main imports pkg.heavy (l.2): not the standard library" in broken.stdout
