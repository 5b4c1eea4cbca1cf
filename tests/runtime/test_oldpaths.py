"""The import paths modules and names had before the package's folders still reach them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import localguide
from localguide.runtime.oldpaths import MOVED, NAMES


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_module_at_its_new_place(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]  # (its own spec kept: reload works)


@pytest.mark.parametrize("module,name", sorted((m, n) for m, names in NAMES.items() for n in names))
def test_a_name_that_moved_is_found_at_its_old_place(module, name):
    assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(NAMES[module][name]), name)


def test_old_forms_of_import_work_alike():
    from localguide import cache
    from localguide.llama import Model, chat, load

    assert cache is importlib.import_module("localguide.runtime.cache") and cache.flush
    assert Model is localguide.Model and load is localguide.load
    assert chat is importlib.import_module("localguide.chat.conversation")
    with pytest.raises(AttributeError):
        localguide.no_such_thing  # noqa: B018


def test_a_monkeypatch_through_an_old_path_reaches_the_module(monkeypatch):
    import localguide.lru as old

    monkeypatch.setattr(old, "_probe", 1, raising=False)
    assert importlib.import_module("localguide.runtime.lru")._probe == 1


def test_python_dash_m_runs_an_old_path():
    r = subprocess.run([sys.executable, "-m", "localguide.cli", "--version"], capture_output=True, text=True, timeout=120)
    old = subprocess.run([sys.executable, "-m", "localguide.info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("localguide ")
    assert old.returncode == 0, old.stderr[-2000:]
