"""The state store is one object made of table families (apportion/serve/store/): each family's
module owns its tables' schema and migrations; a package that keeps tables of its own in the state
file adds its family in one line; no module of the server opens a connection but the store's."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import apportion.serve
from apportion.serve.store import state
from apportion.serve.store.schema import TableFamily
from apportion.serve.store.state import SCHEMA_FAMILIES, StateStore

SERVE = Path(apportion.serve.__file__).parent
QUOTAS = TableFamily("quotas", "CREATE TABLE IF NOT EXISTS quotas (user TEXT PRIMARY KEY, gpus INTEGER NOT NULL);\n")


def tables(store: StateStore) -> set[str]:
    return {name for (name,) in store.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_package_keeps_its_tables_in_the_state_file_by_adding_one_family(tmp_path, monkeypatch):
    migrated: list[str] = []
    family = TableFamily(QUOTAS.name, QUOTAS.schema, lambda store: migrated.append(str(store.path)))
    monkeypatch.setattr(state, "SCHEMA_FAMILIES", [*SCHEMA_FAMILIES, family])

    store = StateStore(tmp_path / "state.db")
    with store.transaction() as conn:
        conn.execute("INSERT INTO quotas VALUES ('ann', 4)")

    assert "quotas" in tables(store) and store.rows("SELECT gpus FROM quotas") == [(4,)]
    assert migrated == [str(tmp_path / "state.db")]
    assert {"jobs", "arrays", "attempts", "users", "throughputs", "samples", "events", "meta"} <= tables(store)


def test_a_family_added_to_an_open_store_gets_its_tables_and_a_read_only_store_is_left_as_it_is(tmp_path):
    store = StateStore(tmp_path / "state.db")
    reader = StateStore(tmp_path / "state.db", read_only=True)

    store.add_family(QUOTAS)
    store.add_family(QUOTAS)  # again, at the next start: nothing changes
    reader.add_family(QUOTAS)

    assert "quotas" in tables(store)
    assert store.rows("SELECT COUNT(*) FROM quotas") == [(0,)]


def test_each_table_is_made_by_one_family_only():
    made = {}
    for family in SCHEMA_FAMILIES:
        for table in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", family.schema):
            assert table not in made, f"{table} made by {made.get(table)} and {family.name}"
            made[table] = family.name
    assert made["jobs"] == "jobs" and made["attempts"] == "attempts" and made["users"] == "credentials"
    assert made["throughputs"] == made["core_speeds"] == made["elastic_steps"] == "measurements"


def test_no_module_of_the_server_opens_a_connection_but_the_stores_and_the_untrusted_files_reader():
    opening = sorted(str(path.relative_to(SERVE)) for path in SERVE.rglob("*.py")
                     if "sqlite3.connect(" in path.read_text())

    assert opening == ["store/connection.py", "store/untrusted_state.py"]


def test_a_store_built_from_its_families_reads_a_file_written_with_the_whole_schema(tmp_path):
    older = sqlite3.connect(tmp_path / "state.db")
    older.executescript(state.SCHEMA)
    older.execute("INSERT INTO jobs (name, user, queue, priority, kind, gpus, total_steps, spec, status, submitted)"
                  " VALUES ('a', 'ann', 'q', 1.0, 'a', 1, 10, '{}', 'queued', 100.0)")
    older.commit()
    older.close()

    store = StateStore(tmp_path / "state.db")

    assert [(j.id, j.name, j.status) for j in store.jobs()] == [(1, "a", "queued")]
