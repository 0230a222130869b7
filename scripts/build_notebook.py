"""Write a Jupyter notebook from a percent-format script (`# %%` cells), or check that it is up to date.

    python scripts/build_notebook.py                      # examples/colab_grpo_lora.py -> .ipynb
    python scripts/build_notebook.py --check              # exit 1 if the .ipynb differs from the script
    python scripts/build_notebook.py SCRIPT.py [OUT.ipynb]

Cell markers: `# %%` starts a code cell, `# %% [markdown]` a markdown cell (its lines lose the
leading `# `), and `# %% tags=["parameters"]` a code cell with those tags (papermill injects
parameters after the cell tagged `parameters`). The script is the source of truth: edit it, then
rebuild the notebook; the notebook is written without outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SCRIPT = os.path.join(ROOT, "examples", "colab_grpo_lora.py")
_MARKER = re.compile(r"^# %%(?P<kind> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")

NOTEBOOK_METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def split_cells(text: str) -> list[dict]:
    """Cells of a percent-format script: dicts with `kind` ("code" or "markdown"), `source` and `tags`."""
    cells: list[dict] = []
    for line in text.splitlines():
        match = _MARKER.match(line)
        if match:
            tags = json.loads(match.group("tags")) if match.group("tags") else []
            cells.append({"kind": "markdown" if match.group("kind") else "code", "lines": [], "tags": tags})
        elif cells:
            cells[-1]["lines"].append(line)
        elif line.strip():
            raise ValueError(f"text before the first '# %%' cell marker: {line!r}")
    for cell in cells:
        lines = cell.pop("lines")
        if cell["kind"] == "markdown":
            lines = [_uncomment(line) for line in lines]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        cell["source"] = "\n".join(lines)
    return cells


def _uncomment(line: str) -> str:
    if line.startswith("# "):
        return line[2:]
    if line.rstrip() in ("#", ""):
        return ""
    raise ValueError(f"markdown cell line does not start with '# ': {line!r}")


def notebook_from_script(path: str):
    """The notebook (an `nbformat.NotebookNode`, no outputs, stable cell ids) for the script at `path`."""
    with open(path, encoding="utf-8") as handle:
        cells = split_cells(handle.read())
    notebook = nbformat.v4.new_notebook(metadata=NOTEBOOK_METADATA)
    for index, cell in enumerate(cells):
        metadata = {"tags": cell["tags"]} if cell["tags"] else {}
        make = nbformat.v4.new_markdown_cell if cell["kind"] == "markdown" else nbformat.v4.new_code_cell
        notebook.cells.append(make(cell["source"], metadata=metadata, id=f"cell-{index:02d}"))
    nbformat.validate(notebook)
    return notebook


def render(notebook) -> str:
    """The notebook file's text, exactly as written to disk."""
    return nbformat.writes(notebook) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", nargs="?", default=DEFAULT_SCRIPT, help="percent-format .py (default: %(default)s)")
    parser.add_argument("notebook", nargs="?", help="output .ipynb (default: the script's path with .ipynb)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the notebook is out of date")
    args = parser.parse_args(argv)
    target = args.notebook or os.path.splitext(args.script)[0] + ".ipynb"
    text = render(notebook_from_script(args.script))
    if args.check:
        current = open(target, encoding="utf-8").read() if os.path.exists(target) else None
        if current != text:
            print(f"{target} is out of date with {args.script}; run: python scripts/build_notebook.py", file=sys.stderr)
            return 1
        print(f"{target} is up to date")
        return 0
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
