"""Load a queues YAML file (hierarchical fairness) into a QueueConfig.

```yaml
queues:
  - name: research
    weight: 2
    policy: fair              # fair | fifo: how the queue shares among its own jobs
    nominal: {v100: 8, k80: 4} # GPUs guaranteed per type; omitted = no guarantee
    borrowing: true           # may use other queues' idle quota (default true)
  - name: prod
    weight: 1
    policy: fifo
```

Errors are InputError naming the file, the line and the field. Whether the nominal GPU types
exist in the cluster is checked later, against the cluster (``QueueConfig.check_cluster``).
See docs/queues.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from apportion.core.errors import InputError
from apportion.core.queues import QueueConfig, queue_config_from_mapping
from apportion.workloads.yaml_file import read_yaml


def load_queues(path: str | Path) -> QueueConfig:
    source = str(path)
    data, root = read_yaml(path, "queues")
    lines = _field_lines(root)
    try:
        config = queue_config_from_mapping(data, source)
    except InputError as err:
        if err.line is not None or err.field is None:
            raise
        raise InputError(source, err.message, line=_nearest_line(lines, err.field), field=err.field) from None
    return replace(config, lines=lines)


def _field_lines(root: yaml.Node | None) -> dict[str, int]:
    """1-based line of every field path (``queues``, ``queues[0].weight``, ``queues[0].nominal.v100``)."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, path: str, lower_keys: bool) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value).strip()
                child = f"{path}.{name}" if path else name
                walk(value, child, child.endswith(".nominal"))
                lines[child] = key.start_mark.line + 1  # a field's line is its key's
                if lower_keys:  # GPU types are matched in lower case
                    lines[f"{path}.{name.lower()}"] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]", False)

    if root is not None:
        walk(root, "", False)
    return lines


def _nearest_line(lines: dict[str, int], field: str) -> int | None:
    """The line of ``field``, or of its nearest parent that has one."""
    path = field
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return lines.get("")
