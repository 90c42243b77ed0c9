"""An import-linter contract the built-in ones cannot say: "these modules import only the standard library
and each other".

The worker and health-check images install the ``warden`` package without its dependencies (no kopf,
kubernetes, jinja2 or pydantic there), so ``warden.node``, ``warden.health`` and the Slurm modules they use
must not import anything else, not even another ``warden`` module that does. A forbidden contract would
need the list of everything else; this one names what is allowed instead. pyproject.toml configures it
(``type = "stdlib_only"``) and ``make lint`` runs it.
"""

from __future__ import annotations

import sys
from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def _inside(module: str, roots: frozenset[str]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def outside_imports(imports: dict[str, set[str]], sources: frozenset[str]) -> list[tuple[str, str]]:
    """(importer, imported) for each import from a module under ``sources`` of a module that is neither
    under ``sources`` nor in the standard library. ``imports``: module -> the modules it imports."""
    return sorted(
        (importer, imported)
        for importer, targets in imports.items()
        if _inside(importer, sources)
        for imported in targets
        if not _inside(imported, sources) and not _stdlib(imported)
    )


class StdlibOnly(Contract):
    """Modules under ``source_modules`` import only the standard library and each other."""

    type_name = "stdlib_only"
    source_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        named: list[str] = self.source_modules  # type: ignore[assignment]  # a field, filled per contract
        sources = frozenset(named)
        imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules if _inside(m, sources)}
        found = outside_imports(imports, sources)
        details = [
            (a, b, [d["line_number"] for d in graph.get_import_details(importer=a, imported=b)]) for a, b in found
        ]
        return ContractCheck(kept=not found, metadata={"imports": details})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["imports"]:
            where = ", ".join(f"l.{n}" for n in lines)
            output.print_error(f"{importer} imports {imported} ({where}): not the standard library")
        output.new_line()
        output.print(
            "These modules run in images that install Warden without its dependencies: "
            "import only the standard library and the modules this contract names."
        )
