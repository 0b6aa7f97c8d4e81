"""A trace's ``after`` column: the job ids (of the same trace, ``;``-separated) a job must see
completed before it starts.

An id the trace does not have, a job naming itself, and jobs that wait for each other in a
cycle are errors naming the file, the line and the jobs; a job may wait for one submitted
after it (it is held until that one arrives and completes).
"""

from __future__ import annotations

import numpy as np

from apportion.core.dependencies import Dependencies
from apportion.core.errors import InputError

SEPARATOR = ";"
MAX_SHOWN = 5  # jobs of a cycle an error names


def after_of_column(text: np.ndarray, job_id: np.ndarray, lines: np.ndarray, source: str) -> Dependencies:
    """[n] the rows of the file each row waits for, from the ``after`` column ``text`` (one
    string a row, "" where it waits for nothing)."""
    n = len(text)
    given = np.flatnonzero(text != "")
    if not len(given):
        return Dependencies.none(n)
    row_of = {str(j): i for i, j in enumerate(job_id.tolist())}
    lists: list[list[int]] = [[] for _ in range(n)]
    for i in given.tolist():
        keys = lists[i]
        for name in str(text[i]).split(SEPARATOR):
            name = name.strip()
            if not name:
                continue
            row = row_of.get(name)
            if row is None:
                raise InputError(source, f"no job '{name}' in the trace", line=int(lines[i]), field="after")
            if row == i:
                raise InputError(source, f"job '{name}' cannot wait for itself", line=int(lines[i]), field="after")
            if row not in keys:
                keys.append(row)
    after = Dependencies.of_lists(lists)
    _check_no_cycle(after, job_id, lines, source)
    return after


def _check_no_cycle(after: Dependencies, job_id: np.ndarray, lines: np.ndarray, source: str) -> None:
    """InputError naming the jobs of a cycle (jobs that wait for each other): none of them could ever start."""
    from scipy.sparse import csr_matrix  # here: a trace without dependencies never loads scipy.sparse
    from scipy.sparse.csgraph import connected_components

    n = len(after)
    graph = csr_matrix((np.ones(len(after.keys), dtype=np.int8), after.keys, after.start), shape=(n, n))
    count, component = connected_components(graph, directed=True, connection="strong")
    if count == n:
        return
    sizes = np.bincount(component, minlength=count)
    members = np.flatnonzero(sizes[component] > 1)
    cycle = members[component[members] == component[members[0]]]
    names = [f"'{job_id[row]}'" for row in cycle[:MAX_SHOWN]]
    more = f" and {len(cycle) - MAX_SHOWN} more" if len(cycle) > MAX_SHOWN else ""
    raise InputError(source, f"jobs {', '.join(names)}{more} wait for each other in a cycle: none of them could "
                     "ever start", line=int(lines[cycle[0]]), field="after")
