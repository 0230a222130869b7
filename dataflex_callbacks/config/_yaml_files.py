"""Read a YAML file the library is given (a strategy, a verl config): refuse duplicate keys and alias bombs.

PyYAML keeps the last of two equal keys without a word, so a file with two ``select:`` blocks would run
one of them silently; and a 1 KB file of nested aliases (``b: [*a, *a, ...]``) expands to billions of
values, which reading the strategy out of it would walk for hours. Both are a `ConfigError` that names
the file and the line. Ordinary aliases and merge keys (``<<: *defaults``) stay accepted: a key a merge
brings in may be overridden, as YAML means it.
"""

from __future__ import annotations

import os
from typing import Any

from dataflex_callbacks.errors import ConfigError

# Values a file may hold once its aliases are expanded. A strategy holds tens and a whole verl config
# hundreds; a billion-laughs file of 1 KB holds billions.
MAX_EXPANDED_VALUES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


def read_yaml_file(path: str | os.PathLike, what: str = "strategy config file") -> Any:
    """Return the content of the YAML (or JSON) file at `path`; fix what the `ConfigError` names.

    `what` opens every message (``strategy config file 'run.yaml' ...``). Refused: a file that does not
    exist, text that is not YAML, a mapping that gives one key twice (the key and both lines are named), an
    alias that refers to itself, and aliases that expand to more than `MAX_EXPANDED_VALUES` values.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{what} {path!r} does not exist")
    import yaml

    with open(path, encoding="utf-8") as handle:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(handle)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_nodes(loader, node, f"{what} {path!r}")
            return loader.construct_document(node)
        except yaml.YAMLError as error:
            raise ConfigError(f"{what} {path!r} is not valid YAML: {' '.join(str(error).split())}") from error
        except RecursionError:
            raise ConfigError(f"{what} {path!r} nests its values too deeply to read; flatten it") from None
        finally:
            loader.dispose()


def _check_unique_keys(loader: Any, node: Any, where: str) -> None:
    """Refuse a mapping `node` that writes one key twice; keys a merge (``<<: *defaults``) brings in may repeat."""
    import yaml

    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        try:
            earlier = first_line.get(key)
        except TypeError:
            continue  # an unhashable key: PyYAML refuses it itself
        if earlier is not None:
            raise ConfigError(
                f"{where} line {line}: key {key!r} is given twice, on line {earlier} and line {line}; YAML keeps "
                f"only the last, so the first would be ignored silently. Keep one {key!r}"
            )
        first_line[key] = line


def _check_nodes(loader: Any, root: Any, where: str) -> None:
    """Refuse, before any value is built, duplicate keys and aliases that expand too far or refer to themselves.

    Each node's expanded size is counted once (memoised), so the check costs the size of the file, not of
    its expansion.
    """
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            line = node.start_mark.line + 1
            raise ConfigError(f"{where} line {line}: an alias refers to the value that holds it; write the value out")
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(loader, node, where)
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_VALUES:
                raise ConfigError(
                    f"{where}: its aliases (*name) expand to more than {MAX_EXPANDED_VALUES:,} values, which "
                    "reading it would walk for hours (an alias bomb); write the values out, or use fewer aliases"
                )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)
