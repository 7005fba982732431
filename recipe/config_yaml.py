"""Reading a config YAML file (recipe, sweep spec, tune spec) into plain Python values, safely and fast.

YAML's safe subset (no Python tags), with three rules on top, the ones OmegaConf's own loader keeps:
a number written `1e-5` is a float (YAML 1.1 reads it as a string), a key given twice is an error,
and aliases (`*name`) may not expand the file past MAX_NODES nodes (an alias bomb: a few lines that
expand to billions) nor refer to themselves. Nothing is resolved or interpolated here.

Parsed without building an OmegaConf container: a spec of 10,000 variants loads in ~0.5 s instead of
~5 s, and what the caller checks is the plain data anyway (recipe.config.to_plain).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_BYTES = 16 * 2**20  # a spec of 10,000 variants is ~0.3 MB
# YAML nodes after aliases are expanded: a spec of 10,000 variants has ~50,000.
MAX_NODES = 1_000_000

FLOAT = re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?$"
                   r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$")


class ConfigLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """yaml's safe loader (C-accelerated where built) with the float, duplicate-key and alias rules above."""

    def construct_document(self, node: yaml.Node) -> Any:
        count_expanded_nodes(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, "found a key given twice", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


# Integers stay integers (the resolver for ints is tried first); `1e-5`, `3.` and `.5e3` become floats.
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT, list("-+0123456789."))


def count_expanded_nodes(root: yaml.Node) -> int:
    """Nodes of the document with every alias expanded, memoised per node (so linear in the file's size).

    Raises a ConstructorError past MAX_NODES or on an alias inside its own anchor.
    """
    memo: dict[int, int] = {}
    visiting: set[int] = set()

    def count(node: yaml.Node) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in visiting:
            raise yaml.constructor.ConstructorError(None, None, "an alias refers to itself", node.start_mark)
        visiting.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [child for pair in node.value for child in pair] if isinstance(node, yaml.MappingNode) else [])
        total = 1
        for child in children:
            total += count(child)
            if total > MAX_NODES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {MAX_NODES:,} YAML nodes once its aliases (*name) are expanded",
                    node.start_mark)
        visiting.discard(key)
        memo[key] = total
        return total

    return count(root)


def load_config_yaml(text: str) -> Any:
    """Plain Python values of a YAML document (None for an empty one); yaml.YAMLError on bad input."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 -- ConfigLoader is a SafeLoader
